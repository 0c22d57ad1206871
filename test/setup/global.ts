/**
 * Jest global set-up: the Debian packages the suites drive (system-packages.ts), a real Kafka broker for the Kafka
 * suites (test/kafka/broker.ts; its address goes to the workers as TEST_KAFKA_BROKERS, or KAFKA_BROKERS is used
 * when set), and the compiled entries that `npm start` runs (scripts/build.mjs, skipped when nothing changed),
 * which the process-level suites start. The broker starts while the build runs.
 */
import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import { promisify } from 'node:util';
import { startKafkaBroker, type KafkaBroker } from '../kafka/broker';
import installSystemPackages from './system-packages';

declare global {
  var svcTestKafka: KafkaBroker | undefined;
}

export default async function globalSetup(): Promise<void> {
  installSystemPackages();
  const external = process.env.KAFKA_BROKERS;
  const broker = external ? undefined : startKafkaBroker();
  await promisify(execFile)(process.execPath, [resolve(__dirname, '../../scripts/build.mjs')]).then(
    ({ stdout, stderr }) => process.stderr.write(stdout + stderr),
    (err: Error & { stdout?: string; stderr?: string }) => {
      throw new Error(`scripts/build.mjs failed: ${err.stdout ?? ''}${err.stderr ?? err.message}`);
    },
  );
  if (broker) {
    globalThis.svcTestKafka = await broker;
    process.env.TEST_KAFKA_BROKERS = globalThis.svcTestKafka.brokers;
  } else {
    process.env.TEST_KAFKA_BROKERS = external;
  }
}
