export * from './types';
export { BackgroundSubscription, type BackgroundSubscriptionOptions } from './background';
export { EmbeddedBus, openEmbeddedBus, type DeadLetter, type EmbeddedBusOptions } from './embedded';
export type { KafkaBusOptions } from './kafka';
export type { KafkaDeadLetter, KafkaDeadLetters, KafkaDeadLettersOptions } from './kafka-dead-letters';
export { PoisonMessageError, isPoison } from './poison';
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
import { metrics } from '../metrics';
import { withTracing } from './tracing';
import { withNamespace } from './namespace';
import type { KafkaBusOptions } from './kafka';
import type { KafkaDeadLetters, KafkaDeadLettersOptions } from './kafka-dead-letters';
import type { KafkaSecurity } from '../config';
import { mapReceived, type BusErrorHandler, type EventBus } from './types';

/** Opens the Kafka bus; kafkajs is loaded only here, so embedded-mode processes never load it. */
export function openKafkaBus(options: KafkaBusOptions): EventBus {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- deliberate lazy load
  const kafka = require('./kafka') as typeof import('./kafka');
  return kafka.openKafkaBus(options);
}

/** Lists and replays the Kafka bus's dead letters (`npm run bus:dead-letters`); kafkajs is loaded only here. */
export function kafkaDeadLetters(options: KafkaDeadLettersOptions): KafkaDeadLetters {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- deliberate lazy load
  const mod = require('./kafka-dead-letters') as typeof import('./kafka-dead-letters');
  return mod.kafkaDeadLetters(options);
}

/**
 * Each message handed to a handler records how old it is (svc_bus_consumer_lag_seconds): a consumer falling behind shows
 * there before its backlog does. On Kafka the age is measured against the producer's clock.
 */
function withConsumerLag(bus: EventBus): EventBus {
  return {
    kind: bus.kind,
    publish: (messages) => bus.publish(messages),
    subscribe: (options) =>
      bus.subscribe(
        mapReceived(options, (m) => {
          metrics.busLag.set({ topic: m.topic, group: options.group }, Math.max(0, Date.now() - m.timestamp) / 1000);
          return m;
        }),
      ),
    ping: () => bus.ping(),
    stalled: () => bus.stalled(),
    close: () => bus.close(),
  };
}

/**
 * Kafka when brokers are configured (distributed mode), otherwise the embedded log shared by this machine; either
 * way its consumers' handlers run in the trace of the write that caused each event (events/tracing.ts), and their
 * lag is measured.
 */
export function openBus(options: {
  kafkaBrokers?: string[];
  /** TLS and SASL of the Kafka clients (KAFKA_SSL, KAFKA_SASL_*: config.ts's kafkaSecurity). */
  kafkaSecurity?: KafkaSecurity;
  clientId: string;
  embeddedPath: string;
  onError?: BusErrorHandler;
  maxAttempts?: number;
  retryMaxMs?: number;
  kafkaPartitions?: number;
  kafkaReplicationFactor?: number;
  /** Prefix of topics and consumer groups on a shared cluster (KAFKA_NAMESPACE). */
  kafkaNamespace?: string;
  kafkaMinInsyncReplicas?: number;
  kafkaCreateTopics?: boolean;
  /** KAFKA_SESSION_TIMEOUT_MS (default 30 s). */
  kafkaSessionTimeoutMs?: number;
}): EventBus {
  if (options.kafkaBrokers && options.kafkaBrokers.length > 0) {
    const kafka = openKafkaBus({
      ...options.kafkaSecurity,
      brokers: options.kafkaBrokers,
      clientId: options.clientId,
      onError: options.onError,
      maxAttempts: options.maxAttempts,
      retryMaxMs: options.retryMaxMs,
      numPartitions: options.kafkaPartitions,
      replicationFactor: options.kafkaReplicationFactor,
      minInsyncReplicas: options.kafkaMinInsyncReplicas,
      createTopics: options.kafkaCreateTopics,
      sessionTimeoutMs: options.kafkaSessionTimeoutMs,
    });
    return withConsumerLag(withTracing(withNamespace(kafka, options.kafkaNamespace)));
  }
  return withConsumerLag(
    withTracing(
      openEmbeddedBus({
        path: options.embeddedPath,
        onError: options.onError,
        maxAttempts: options.maxAttempts,
        retryMaxMs: options.retryMaxMs,
      }),
    ),
  );
}
