import { busContract } from './bus.contract';
import { openKafkaBus } from './kafka';

// Kafka cannot run on every machine (no broker here, and none is started by the tests): the contract runs
// against a real broker only when KAFKA_BROKERS is set, e.g. KAFKA_BROKERS=localhost:9092 with docker-compose.

const configured = process.env.KAFKA_BROKERS ?? '';
const brokers = configured
  .split(',')
  .map((b) => b.trim())
  .filter(Boolean);
const d = brokers.length > 0 ? describe : describe.skip;

d('kafka', () => {
  // A first consumer-group join takes a few seconds on a fresh broker.
  jest.setTimeout(60_000);
  busContract('kafka', async (options) => openKafkaBus({ brokers, clientId: 'kit-events-test', ...options }));
});
