/**
 * The event port: a durable, partitioned-by-key log with consumer groups. Kafka (kafkajs) in distributed mode,
 * an embedded SQLite log shared by the processes of one machine otherwise. Delivery is at least once: consumers
 * must be idempotent by message id.
 */

export interface BusMessage {
  /** Unique event id; consumers deduplicate on it. */
  id: string;
  topic: string;
  /** Partition key: the tenant id, so one tenant's events stay in order. */
  key: string;
  value: Uint8Array;
  /** Trace context (traceparent) and the event type travel here. */
  headers: Record<string, string>;
}

export interface ReceivedMessage extends BusMessage {
  /** Position in the log (Kafka `partition:offset` / embedded sequence), for logs and tests. */
  offset: string;
  /** Milliseconds since epoch when the bus accepted it. */
  timestamp: number;
}

export interface SubscribeOptions {
  /** Consumer group: each group sees every message once (at least once); its position survives restarts. */
  group: string;
  topics: string[];
  /**
   * Called once per message, in order per key. Throwing leaves the message unacknowledged: it is retried with
   * backoff and later messages with the same key wait behind it. A PoisonMessageError (the message cannot be
   * decoded or validated) is retried up to the bus's attempt limit and then dead-lettered; any other error means a
   * dependency is unavailable and is retried without limit (the consumer reports itself stalled meanwhile).
   */
  handler: (message: ReceivedMessage) => Promise<void>;
  /**
   * Optional: handles several messages at once, in their order (one transaction for a batch instead of one each).
   * The embedded bus hands it what one read found, Kafka a fetched batch of one partition. When it throws, each message of
   * that batch goes through `handler` instead (retries and dead letters as usual, a poison message found alone), so
   * it must do what `handler` would do for each, and be idempotent like it.
   */
  handleBatch?: (messages: ReceivedMessage[]) => Promise<void>;
  /** Where a new group starts. Default `earliest`. */
  fromBeginning?: boolean;
}

/** `options` with each message its handlers get (one, or each of a batch) passed through `f` first. */
export function mapReceived(options: SubscribeOptions, f: (message: ReceivedMessage) => ReceivedMessage): SubscribeOptions {
  const { handler, handleBatch } = options;
  return { ...options, handler: (m) => handler(f(m)), handleBatch: handleBatch && ((ms) => handleBatch(ms.map(f))) };
}

export interface Subscription {
  stop(): Promise<void>;
}

/**
 * Where adapters report what they cannot throw to a caller: a failed handler call (with its message; it will be
 * retried) or a failure of the consuming loop itself. The kit has no logger dependency here; services pass one.
 */
export type BusErrorHandler = (err: unknown, message?: ReceivedMessage) => void;

/** A consumer whose handler keeps failing on an unavailable dependency: its partition waits while it retries. */
export interface StalledConsumer {
  group: string;
  topic: string;
  /** The waiting message's position (`partition:offset` / sequence). */
  offset: string;
  /** Failed handler calls of that message so far. */
  attempts: number;
  /** When its first failed call was (ms since epoch). */
  since: number;
  error: string;
}

export interface EventBus {
  readonly kind: 'embedded' | 'kafka';
  publish(messages: BusMessage[]): Promise<void>;
  subscribe(options: SubscribeOptions): Promise<Subscription>;
  ping(): Promise<void>;
  /** This bus's consumers that are retrying a message on an unavailable dependency right now. */
  stalled(): StalledConsumer[];
  close(): Promise<void>;
}

/**
 * Topics a bus needed and found missing where it must not create them (KAFKA_CREATE_TOPICS=false, the production
 * default: topics are deployed with their replication, see deploy/). Retrying cannot mend it.
 */
export class MissingTopicsError extends Error {
  constructor(readonly topics: string[]) {
    super(
      `Kafka topic${topics.length > 1 ? 's' : ''} missing: ${topics.join(', ')} (KAFKA_CREATE_TOPICS is off: create ` +
        'them with `npm run kafka:topics`, the kafka-topics Job of deploy/helm/svc)',
    );
    this.name = 'MissingTopicsError';
  }
}
