export * from './types';
export { EmbeddedBus, openEmbeddedBus, type DeadLetter, type EmbeddedBusOptions } from './embedded';
export type { KafkaBusOptions } from './kafka';
export { publishTraced, tracedHandler, withTracing } from './tracing';
export {
  OutboxRelay,
  addToOutbox,
  outboxCollection,
  outboxKeys,
  outboxLease,
  OUTBOX_COLLECTIONS,
  type OutboxRecord,
  type OutboxRelayOptions,
} from './outbox';

import { openEmbeddedBus } from './embedded';
import { withTracing } from './tracing';
import type { KafkaBusOptions } from './kafka';
import type { BusErrorHandler, EventBus } from './types';

/** Opens the Kafka bus; kafkajs is loaded only here, so embedded-mode processes never load it. */
export function openKafkaBus(options: KafkaBusOptions): EventBus {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- deliberate lazy load
  const kafka = require('./kafka') as typeof import('./kafka');
  return kafka.openKafkaBus(options);
}

/**
 * Kafka when brokers are configured (distributed mode), otherwise the embedded log shared by this machine; either
 * way its consumers' handlers run in the trace of the write that caused each event (events/tracing.ts).
 */
export function openBus(options: {
  kafkaBrokers?: string[];
  clientId: string;
  embeddedPath: string;
  onError?: BusErrorHandler;
  maxAttempts?: number;
  kafkaPartitions?: number;
  kafkaReplicationFactor?: number;
}): EventBus {
  if (options.kafkaBrokers && options.kafkaBrokers.length > 0) {
    return withTracing(
      openKafkaBus({
        brokers: options.kafkaBrokers,
        clientId: options.clientId,
        onError: options.onError,
        maxAttempts: options.maxAttempts,
        numPartitions: options.kafkaPartitions,
        replicationFactor: options.kafkaReplicationFactor,
      }),
    );
  }
  return withTracing(openEmbeddedBus({ path: options.embeddedPath, onError: options.onError, maxAttempts: options.maxAttempts }));
}
