/**
 * The broker of this test run: the jest global set-up starts one (or takes KAFKA_BROKERS) and passes it as
 * TEST_KAFKA_BROKERS. Missing means the suite runs outside `npm test`'s set-up: fail, never skip.
 */
export function testKafkaBrokers(): string[] {
  const brokers = (process.env.TEST_KAFKA_BROKERS ?? process.env.KAFKA_BROKERS ?? '')
    .split(',')
    .map((b) => b.trim())
    .filter(Boolean);
  if (!brokers.length) throw new Error('No Kafka broker: run the suite through jest (its global set-up starts one) or set KAFKA_BROKERS.');
  return brokers;
}

/** The SASL_SSL listener of a test broker, and the one user it knows (SCRAM-SHA-256/512 and PLAIN). */
export interface SecureKafka {
  /** `127.0.0.1:PORT` of the SASL_SSL listener. */
  brokers: string[];
  /** The CA that signed the listener's certificate (KAFKA_SSL_CA_FILE), and one that did not. */
  caFile: string;
  otherCaFile: string;
  username: string;
  password: string;
  /** Stops what this call started (nothing when it is the run's shared broker). */
  release(): Promise<void>;
}

/** The variable through which the global set-up hands its broker's SASL_SSL listener to the suites (JSON). */
export const SECURE_KAFKA_ENV = 'TEST_KAFKA_SECURE';

/**
 * The SASL_SSL listener of the run's broker (the global set-up starts it with one), or, when the run uses a broker
 * of its own (KAFKA_BROKERS), a broker started here with such a listener.
 */
export async function secureTestKafka(): Promise<SecureKafka> {
  const shared = process.env[SECURE_KAFKA_ENV];
  if (shared) return { ...(JSON.parse(shared) as Omit<SecureKafka, 'release'>), release: async () => undefined };
  // Required here: suites that use only the shared broker never load the broker's helpers.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { startSecureKafkaBroker } = require('./secure') as typeof import('./secure');
  const { broker, secure } = await startSecureKafkaBroker();
  return { ...secure, release: () => broker.destroy() };
}
