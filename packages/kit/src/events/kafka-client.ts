/**
 * The one place a kafkajs client is created (the bus, its dead letters, `npm run kafka:topics`, the tests' admin
 * clients), so that each reaches the brokers the same way: TLS with the configured CA, SASL with the configured
 * mechanism and credentials (config.ts's kafkaSecurity, from KAFKA_SSL, KAFKA_SSL_CA_FILE and KAFKA_SASL_*).
 */
import { Kafka, logLevel as kafkaLogLevel, type RetryOptions, type SASLOptions } from 'kafkajs';
import type { KafkaSecurity } from '../config';

export interface KafkaClientOptions extends KafkaSecurity {
  brokers: string[];
  clientId: string;
  /** kafkajs logs to the console itself: errors only by default (ours go through the callers' own reporting). */
  logLevel?: kafkaLogLevel;
  retry?: RetryOptions;
}

/**
 * A TLS handshake and a SASL exchange take more round trips than a plain connect: on a loaded machine kafkajs's
 * default of one second would fail connections that are merely slow.
 */
const SECURE_CONNECTION_TIMEOUT_MS = 5000;

export function kafkaClient(options: KafkaClientOptions): Kafka {
  const secure = options.ssl !== undefined || options.sasl !== undefined;
  return new Kafka({
    clientId: options.clientId,
    brokers: options.brokers,
    logLevel: options.logLevel ?? kafkaLogLevel.ERROR,
    retry: options.retry,
    // Without a CA the system's trust store decides (managed clusters' certificates are publicly signed).
    ssl: options.ssl ? (options.ssl.ca ? { ca: [options.ssl.ca] } : true) : undefined,
    // One of kafkajs's mechanisms (KAFKA_SASL_MECHANISM is checked against the list), in a type it cannot narrow.
    sasl: options.sasl as SASLOptions | undefined,
    ...(secure ? { connectionTimeout: SECURE_CONNECTION_TIMEOUT_MS } : {}),
  });
}
