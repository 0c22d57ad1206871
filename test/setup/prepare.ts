/**
 * What the suites need from the machine, got ahead of Jest: the Debian packages (system-packages.ts) and the jars of the
 * Kafka broker (test/kafka/broker.ts) and of Helm (test/helm/helm.ts) from Maven Central. `npm test` runs this beside the type check and lint
 * (scripts/checks.mjs), so that on a fresh machine the downloads overlap with work that is all CPU. Jest's global
 * set-up asks again and finds everything there; run alone, Jest still gets it all itself.
 */
import { helmClasspath } from '../helm/helm';
import { brokerClasspath } from '../kafka/broker';
import installSystemPackages from './system-packages';

installSystemPackages();
if (!process.env.KAFKA_BROKERS) brokerClasspath();
helmClasspath();
