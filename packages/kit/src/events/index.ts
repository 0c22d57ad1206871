export * from './types';
export { EmbeddedBus, openEmbeddedBus, type EmbeddedBusOptions } from './embedded';
export { openKafkaBus, type KafkaBusOptions } from './kafka';
export { OutboxRelay, addToOutbox, outboxCollection, type OutboxRecord, type OutboxRelayOptions } from './outbox';

import { openEmbeddedBus } from './embedded';
import { openKafkaBus } from './kafka';
import type { BusErrorHandler, EventBus } from './types';

/** Kafka when brokers are configured (distributed mode), otherwise the embedded log shared by this machine. */
export function openBus(options: { kafkaBrokers?: string[]; clientId: string; embeddedPath: string; onError?: BusErrorHandler }): EventBus {
  if (options.kafkaBrokers && options.kafkaBrokers.length > 0) {
    return openKafkaBus({ brokers: options.kafkaBrokers, clientId: options.clientId, onError: options.onError });
  }
  return openEmbeddedBus({ path: options.embeddedPath, onError: options.onError });
}
