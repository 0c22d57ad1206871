/**
 * The Kafka event bus (kafkajs). Messages are keyed by `key` (the tenant id), so one tenant's events land in one
 * partition and stay in order; the event id travels in the `id` header.
 *
 * Consumers handle a fetched batch message by message and mark each offset once its handler has succeeded (or it
 * went to the dead letters); marked offsets are committed together, at the end of each batch and, within a long
 * batch, every COMMIT_EVERY_MS or COMMIT_EVERY_MESSAGES, not one round trip per message. Nothing is marked before
 * it is handled, so a crash redelivers at most the handled-but-uncommitted tail: at least once. A failing message
 * is retried in place (seek back + pause) so nothing is skipped: without limit when a dependency is unavailable,
 * up to `maxAttempts` calls when its handler says it is poison (then it goes to `<topic>.dead-letters`).
 */
import {
  Partitioners,
  type Admin,
  type Consumer,
  type IHeaders,
  type EachBatchPayload,
  type KafkaMessage,
  type Message,
  type Kafka,
  type Producer,
} from 'kafkajs';
import type { KafkaSecurity } from '../config';
import { withDeadline } from '../deadline';
import { metrics } from '../metrics';
import { kafkaClient } from './kafka-client';
import { absentTopics, createKafkaTopics, deadLetterTopic, topicProblems } from './kafka-topics';
import { isPoison } from './poison';
import { Stalls } from './stalls';
import {
  MissingTopicsError,
  type BusErrorHandler,
  type BusMessage,
  type EventBus,
  type ReceivedMessage,
  type StalledConsumer,
  type SubscribeOptions,
  type Subscription,
} from './types';

/** `ssl` and `sasl`: how the clients reach the brokers (config.ts's kafkaSecurity). */
export interface KafkaBusOptions extends KafkaSecurity {
  brokers: string[];
  clientId: string;
  /** Failed handler calls (retried) and consumer crashes (kafkajs restarts the consumer). */
  onError?: BusErrorHandler;
  /** Partitions for topics this bus creates. Default 6. */
  numPartitions?: number;
  /** Replication factor of the topics this bus creates. Default 1 (one broker); the services' default follows NODE_ENV. */
  replicationFactor?: number;
  /** `min.insync.replicas` of the topics this bus creates (with acks=-1: replicas that have a write before it is acknowledged). Default 1. */
  minInsyncReplicas?: number;
  /**
   * Whether a topic found missing is created (default true). When not, publish and subscribe fail with
   * MissingTopicsError naming it: production deploys its topics (deploy/helm/svc: the kafka-topics hook Job).
   */
  createTopics?: boolean;
  /**
   * Handler calls a poison message (its handler threw a PoisonMessageError) gets before it is sent to
   * `<topic>.dead-letters` (headers name the group, the error and the attempts) and its offset committed, so it
   * cannot hold its partition. Default 5. Other errors (an unavailable dependency) are retried without limit.
   */
  maxAttempts?: number;
  /** Cap of the retry backoff (100 ms doubling). Default 5000. */
  retryMaxMs?: number;
  /** A publish (connecting and creating its topics included) that has not finished by then fails. Default 15 s. */
  publishTimeoutMs?: number;
  /** Consumer group session: a consumer that died without leaving loses its partitions after it. Default 30 s. */
  sessionTimeoutMs?: number;
}

export { deadLetterTopic };
/** A publish that has not finished by then fails (the outbox keeps the records and tries again). */
const PUBLISH_TIMEOUT_MS = 15_000;
const PING_TIMEOUT_MS = 3000;
/** How long a subscribe or publish waits for new topics' partitions to have leaders. */
const TOPIC_READY_TIMEOUT_MS = 30_000;
/** close() gives the consumers and clients this long to leave cleanly; a broker that is down cannot hold it longer. */
const CLOSE_TIMEOUT_MS = 5000;

export const ID_HEADER = 'id';
/**
 * A message replayed from the dead letters for one group only (kafka-dead-letters.ts): the other groups of its
 * topic, which handled or dead-lettered it in their own time, skip it.
 */
export const REPLAY_GROUP_HEADER = 'replay-group';
/** Within a batch, marked offsets are committed once this much time or this many messages have gone by. */
const COMMIT_EVERY_MS = 1000;
const COMMIT_EVERY_MESSAGES = 100;
const RETRY_MIN_MS = 100;
/** kafkajs's own retries of a request (connect, metadata, send, commit), before it reports the failure. */
const CLIENT_RETRY = { retries: 5, initialRetryTime: 200, maxRetryTime: 5_000 };

export function openKafkaBus(options: KafkaBusOptions): EventBus {
  return new KafkaBus(options);
}

class KafkaBus implements EventBus {
  readonly kind = 'kafka' as const;
  private readonly kafka: Kafka;
  private readonly producer: Producer;
  private readonly admin: Admin;
  private readonly onError: BusErrorHandler;
  private readonly numPartitions: number;
  private readonly maxAttempts: number;
  private readonly retryMaxMs: number;
  private readonly publishTimeoutMs: number;
  private readonly sessionTimeoutMs: number;
  private readonly replicationFactor: number;
  private readonly minInsyncReplicas: number;
  private readonly createTopics: boolean;
  private readonly knownTopics = new Set<string>();
  private readonly subscriptions = new Set<Subscription>();
  private readonly stalls = new Set<Stalls>();
  private connecting: Promise<void> | null = null;
  private connected = false;
  /** Why the last connection attempt failed (until one succeeds). */
  private lastConnectFailure: unknown = null;
  private closed = false;

  constructor(options: KafkaBusOptions) {
    this.onError = options.onError ?? (() => {});
    this.numPartitions = options.numPartitions ?? 6;
    // Bounded retries: kafkajs's idempotent producer would otherwise retry for ever, hanging the relay and shutdown.
    this.kafka = kafkaClient({ ...options, retry: CLIENT_RETRY });
    this.maxAttempts = options.maxAttempts ?? 5;
    this.retryMaxMs = options.retryMaxMs ?? 5000;
    this.publishTimeoutMs = options.publishTimeoutMs ?? PUBLISH_TIMEOUT_MS;
    this.sessionTimeoutMs = options.sessionTimeoutMs ?? 30_000;
    this.replicationFactor = options.replicationFactor ?? 1;
    this.minInsyncReplicas = options.minInsyncReplicas ?? 1;
    this.createTopics = options.createTopics ?? true;
    // Idempotent: broker-side dedupe of producer retries; one request in flight keeps per-partition order.
    // The Java-compatible partitioner is explicit so every client maps a key to the same partition.
    this.producer = this.kafka.producer({
      idempotent: true,
      maxInFlightRequests: 1,
      createPartitioner: Partitioners.DefaultPartitioner,
    });
    this.admin = this.kafka.admin();
  }

  /**
   * Resolves once Kafka acknowledged every message (acks=-1), or fails within `publishTimeoutMs` whatever the broker
   * does (down, unreachable, slow): connecting and creating topics count toward that bound too.
   */
  async publish(messages: BusMessage[]): Promise<void> {
    if (messages.length === 0) return;
    await withDeadline(
      this.send(messages),
      this.publishTimeoutMs,
      `Kafka did not acknowledge the batch within ${this.publishTimeoutMs} ms`,
    );
  }

  private async send(messages: BusMessage[]): Promise<void> {
    await this.connect();
    const byTopic = new Map<string, Message[]>();
    for (const m of messages) {
      let list = byTopic.get(m.topic);
      if (!list) byTopic.set(m.topic, (list = []));
      list.push({
        key: m.key,
        value: Buffer.from(m.value.buffer, m.value.byteOffset, m.value.byteLength),
        headers: { ...m.headers, [ID_HEADER]: m.id },
      });
    }
    await this.ensureTopics([...byTopic.keys()]);
    await this.producer.sendBatch({ acks: -1, topicMessages: [...byTopic].map(([topic, list]) => ({ topic, messages: list })) });
  }

  async subscribe(options: SubscribeOptions): Promise<Subscription> {
    await this.connect();
    await this.ensureTopics(options.topics);
    let stopping: Promise<void> | null = null;
    // maxWaitTimeInMs bounds how long stop() waits for an idle fetch to return. kafkajs restarts a consumer that
    // crashed (the broker went away) by itself, until this subscription stops: a stop that raced a crash must not
    // leave it restarting for ever.
    const consumer = this.kafka.consumer({
      groupId: options.group,
      maxWaitTimeInMs: 1000,
      sessionTimeout: this.sessionTimeoutMs,
      retry: { ...CLIENT_RETRY, restartOnFailure: async () => stopping === null },
    });
    const stalls = new Stalls(options.group);
    const retry = new RetryState(consumer, this.onError, stalls, this.retryMaxMs);
    consumer.on(consumer.events.CRASH, (event) => this.onError(event.payload.error));
    // A new assignment: partitions that were failing may be another consumer's now (theirs to report).
    consumer.on(consumer.events.GROUP_JOIN, () => retry.reset());
    await consumer.connect();
    try {
      await consumer.subscribe({ topics: options.topics, fromBeginning: options.fromBeginning ?? true });
      await consumer.run({
        // kafkajs commits what eachBatch resolved: at the end of each batch, and when commitOffsetsIfNecessary
        // finds the interval or threshold reached. Nothing is resolved before its handler has succeeded.
        autoCommit: true,
        autoCommitInterval: COMMIT_EVERY_MS,
        autoCommitThreshold: COMMIT_EVERY_MESSAGES,
        eachBatchAutoResolve: false,
        eachBatch: (payload) => this.handleBatch(options, retry, payload),
      });
    } catch (err) {
      await consumer.disconnect().catch(() => {});
      throw err;
    }
    this.stalls.add(stalls);
    const subscription: Subscription = {
      stop: () => {
        stopping ??= (async () => {
          retry.stop();
          // Waits for the in-flight batch (its marked offsets are committed), then leaves the group. With the broker
          // down leaving cannot finish: bounded, and the group's session expiry hands the partitions over instead.
          await withDeadline(consumer.disconnect(), CLOSE_TIMEOUT_MS, 'the consumer did not leave its group in time').catch(
            (err: unknown) => this.onError(err),
          );
          retry.reset();
          this.stalls.delete(stalls);
          this.subscriptions.delete(subscription);
        })();
        return stopping;
      },
    };
    this.subscriptions.add(subscription);
    return subscription;
  }

  /**
   * Handles one fetched batch of one partition in order. Stops early when the consumer stops, when a seek made the
   * rest of the batch stale, or when a message failed (it was sought back to and its partition paused).
   */
  private async handleBatch(options: SubscribeOptions, retry: RetryState, payload: EachBatchPayload): Promise<void> {
    const { batch, pause, isRunning, isStale } = payload;
    const { topic, partition } = batch;
    if (await this.handledAsBatch(options, payload)) {
      retry.succeeded(topic, partition);
      await this.acknowledge(payload, batch.messages[batch.messages.length - 1].offset);
      return;
    }
    for (const message of batch.messages) {
      if (!isRunning() || isStale()) return;
      const received = toReceived(topic, partition, message);
      const replayFor = received.headers[REPLAY_GROUP_HEADER];
      if (replayFor !== undefined && replayFor !== options.group) {
        // Replayed from another group's dead letters: this group had its own turn at it.
      } else {
        try {
          await options.handler(received);
          metrics.busHandled.inc({ topic, group: options.group, outcome: 'ok' });
        } catch (err) {
          this.onError(err, received);
          const poison = isPoison(err);
          const again = !poison || retry.attemptsOf(topic, partition, message.offset) + 1 < this.maxAttempts;
          if (again || !(await this.setAside(options.group, topic, message, err, received))) {
            metrics.busHandled.inc({ topic, group: options.group, outcome: poison ? 'poison' : 'retry' });
            retry.failed(topic, partition, message.offset, pause, poison ? null : err);
            return; // not throwing: kafkajs would retry the whole batch and eventually restart the consumer
          }
          metrics.busHandled.inc({ topic, group: options.group, outcome: 'dead_letter' });
        }
      }
      retry.succeeded(topic, partition);
      await this.acknowledge(payload, message.offset, received);
    }
  }

  /** Marks everything up to `offset` handled, and commits when the interval or threshold is reached. */
  private async acknowledge(payload: EachBatchPayload, offset: string, received?: ReceivedMessage): Promise<void> {
    payload.resolveOffset(offset);
    try {
      await payload.commitOffsetsIfNecessary();
      await payload.heartbeat();
    } catch (err) {
      // Handled but not committed (e.g. a rebalance): it may be delivered again, which is allowed. kafkajs
      // handles its own errors (rejoins the group), so they go back to it.
      this.onError(err, received);
      throw err;
    }
  }

  /**
   * A fetched batch of several messages through the subscription's batch handler, if it has one: true when it
   * succeeded. When it throws, false: the batch goes through `handler` message by message (retries, dead letters).
   * Messages replayed for another group are left out (that group had its turn).
   */
  private async handledAsBatch(options: SubscribeOptions, payload: EachBatchPayload): Promise<boolean> {
    const { batch, isRunning, isStale } = payload;
    if (!options.handleBatch || batch.messages.length < 2 || !isRunning() || isStale()) return false;
    const mine = batch.messages
      .map((m) => toReceived(batch.topic, batch.partition, m))
      .filter((m) => [undefined, options.group].includes(m.headers[REPLAY_GROUP_HEADER]));
    try {
      if (mine.length > 0) await options.handleBatch(mine);
    } catch (err) {
      this.onError(err);
      return false;
    }
    for (const m of mine) metrics.busHandled.inc({ topic: m.topic, group: options.group, outcome: 'ok' });
    return true;
  }

  /** Publishes a poison message to `<topic>.dead-letters`; false (reported) when that fails, so it is retried. */
  private async setAside(group: string, topic: string, message: KafkaMessage, err: unknown, received: ReceivedMessage): Promise<boolean> {
    try {
      await this.publishDeadLetter(group, topic, message, err);
      return true;
    } catch (publishErr) {
      this.onError(publishErr, received);
      return false;
    }
  }

  private async publishDeadLetter(group: string, topic: string, message: KafkaMessage, err: unknown): Promise<void> {
    const attempts = this.maxAttempts;
    const headers = { ...message.headers };
    delete headers[REPLAY_GROUP_HEADER]; // a replay that failed again is this group's dead letter like any other
    const dlq = deadLetterTopic(topic);
    await this.ensureTopics([dlq]);
    await this.producer.send({
      topic: dlq,
      acks: -1,
      messages: [
        {
          key: message.key,
          value: message.value,
          headers: {
            ...headers,
            'dead-letter-group': group,
            'dead-letter-error': String((err as Error)?.message ?? err).slice(0, 500),
            'dead-letter-attempts': String(attempts),
            'dead-letter-offset': message.offset,
          },
        },
      ],
    });
  }

  /**
   * Answers within PING_TIMEOUT_MS: kafkajs's own retries could hold a health probe for many seconds. While the
   * clients are connecting again after an attempt that failed, it fails at once with that attempt's error, so a
   * probe names the cause (credentials refused, a certificate not trusted) rather than a timeout.
   */
  async ping(): Promise<void> {
    if (this.connecting && !this.connected && this.lastConnectFailure) throw this.lastConnectFailure;
    await withDeadline(
      this.connect().then(() => this.admin.describeCluster()),
      PING_TIMEOUT_MS,
      `Kafka did not answer within ${PING_TIMEOUT_MS} ms`,
    );
  }

  stalled(): StalledConsumer[] {
    return [...this.stalls].flatMap((s) => s.list());
  }

  /** Bounded whatever the broker does: each consumer gets CLOSE_TIMEOUT_MS to leave, the clients as long again. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([...this.subscriptions].map((s) => s.stop()));
    const connecting = this.connecting;
    if (!connecting) return;
    // A connection attempt still retrying against a broker that is down ends with its retries; it is not waited for.
    const disconnect = connecting.then(
      () => Promise.all([this.producer.disconnect(), this.admin.disconnect()]),
      () => Promise.all([this.producer.disconnect(), this.admin.disconnect()]),
    );
    await withDeadline(disconnect, CLOSE_TIMEOUT_MS, 'the Kafka clients did not disconnect in time').catch((err: unknown) =>
      this.onError(err),
    );
  }

  /** Connects the producer and admin client on first use; a failed attempt is retried on the next call. */
  private connect(): Promise<void> {
    if (this.closed) return Promise.reject(new Error('kafka bus is closed'));
    if (!this.connecting) {
      const attempt = Promise.all([this.producer.connect(), this.admin.connect()]).then(() => undefined);
      this.connecting = attempt;
      attempt.then(
        () => {
          this.connected = true;
          this.lastConnectFailure = null;
        },
        (err: unknown) => {
          this.lastConnectFailure = err;
          if (this.connecting === attempt) this.connecting = null;
        },
      );
    }
    return this.connecting;
  }

  /**
   * Makes sure `topics` exist before first use. Creating, they get this bus's partitions, replicas and
   * min.insync.replicas; a creation the broker refuses (ACLs) is fine when the topics exist anyway, otherwise it
   * fails (never left to the broker's auto-creation, whose defaults would be one replica). Not creating, a missing
   * topic fails with MissingTopicsError; an existing one with fewer replicas than configured is reported.
   *
   * Several processes start together and create the same topics: the loser's creation fails (TOPIC_ALREADY_EXISTS)
   * while the winner's topic may not have its leaders yet, so a subscribe right after would fail with
   * UNKNOWN_TOPIC_OR_PARTITION. Every caller therefore waits for the partitions' leaders, whoever created the topic.
   */
  private async ensureTopics(topics: string[]): Promise<void> {
    const missing = topics.filter((t) => !this.knownTopics.has(t));
    if (missing.length === 0) return;
    const settings = {
      numPartitions: this.numPartitions,
      replicationFactor: this.replicationFactor,
      minInsyncReplicas: this.minInsyncReplicas,
    };
    if (this.createTopics) {
      try {
        await createKafkaTopics(this.admin, missing, settings);
      } catch (err) {
        const absent = await absentTopics(this.admin, missing);
        if (absent.length) throw new Error(`could not create Kafka topics ${absent.join(', ')}: ${(err as Error).message}`, { cause: err });
        if (!isAlreadyExists(err)) this.onError(err);
      }
    } else {
      const absent = await absentTopics(this.admin, missing);
      if (absent.length) throw new MissingTopicsError(absent);
      for (const problem of await topicProblems(this.admin, missing, settings)) this.onError(new Error(problem));
    }
    await this.awaitLeaders(missing);
    for (const t of missing) this.knownTopics.add(t);
  }

  private async awaitLeaders(topics: string[]): Promise<void> {
    const deadline = Date.now() + TOPIC_READY_TIMEOUT_MS;
    for (let wait = 50; ; wait = Math.min(wait * 2, 1000)) {
      try {
        const { topics: meta } = await this.admin.fetchTopicMetadata({ topics });
        if (meta.length === topics.length && meta.every((t) => t.partitions.length > 0 && t.partitions.every((p) => p.leader >= 0))) return;
      } catch (err) {
        if (Date.now() > deadline) throw err;
      }
      if (Date.now() > deadline) throw new Error(`Kafka topics without leaders after ${TOPIC_READY_TIMEOUT_MS} ms: ${topics.join(', ')}`);
      await new Promise((r) => setTimeout(r, wait));
    }
  }
}

/** createTopics' error when some of the topics were created meanwhile by another process. */
function isAlreadyExists(err: unknown): boolean {
  const e = err as { type?: string; topicErrors?: Array<{ type?: string }> };
  if (e?.type === 'TOPIC_ALREADY_EXISTS') return true;
  return Array.isArray(e?.topicErrors) && e.topicErrors.length > 0 && e.topicErrors.every((t) => t.type === 'TOPIC_ALREADY_EXISTS');
}

/**
 * Backoff for failing messages, per partition. A failed message is not acknowledged: we seek back to it and pause
 * its partition for 100 ms doubling to `maxMs`, so later messages of that partition wait and nothing is skipped.
 * Other partitions keep flowing. A partition failing on an unavailable dependency is reported stalled meanwhile.
 */
class RetryState {
  private readonly attempts = new Map<string, { offset: string; count: number }>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private stopped = false;

  constructor(
    private readonly consumer: Consumer,
    private readonly onError: BusErrorHandler,
    private readonly stalls: Stalls,
    private readonly maxMs: number,
  ) {}

  /** `dependencyError`: what the unavailable dependency said (null for a poison message). */
  failed(topic: string, partition: number, offset: string, pause: () => () => void, dependencyError: unknown): void {
    const slot = `${topic}:${partition}`;
    const prev = this.attempts.get(slot);
    const count = prev?.offset === offset ? prev.count + 1 : 1;
    this.attempts.set(slot, { offset, count });
    if (dependencyError !== null) this.stalls.failed(slot, topic, `${partition}:${offset}`, dependencyError);
    else this.stalls.cleared(slot);
    // Seek before returning: kafkajs then drops the rest of this batch and refetches from `offset`.
    this.consumer.seek({ topic, partition, offset });
    const resume = pause();
    const timer = setTimeout(
      () => {
        this.timers.delete(timer);
        if (this.stopped) return;
        try {
          resume();
        } catch (err) {
          this.onError(err);
        }
      },
      Math.min(RETRY_MIN_MS * 2 ** Math.min(count - 1, 30), this.maxMs),
    );
    this.timers.add(timer);
  }

  /** Failed calls so far of the message at `offset` (0 when it has not failed). */
  attemptsOf(topic: string, partition: number, offset: string): number {
    const prev = this.attempts.get(`${topic}:${partition}`);
    return prev?.offset === offset ? prev.count : 0;
  }

  succeeded(topic: string, partition: number): void {
    const slot = `${topic}:${partition}`;
    this.attempts.delete(slot);
    this.stalls.cleared(slot);
  }

  /** Forgets the failures (a rebalance, a stop): whoever gets the partition starts counting afresh. */
  reset(): void {
    this.attempts.clear();
    this.stalls.clearAll();
  }

  stop(): void {
    this.stopped = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
  }
}

function toReceived(topic: string, partition: number, message: KafkaMessage): ReceivedMessage {
  const headers = headersToStrings(message.headers);
  const id = headers[ID_HEADER] ?? `${topic}:${partition}:${message.offset}`; // a producer outside this kit
  delete headers[ID_HEADER];
  return {
    id,
    topic,
    key: message.key?.toString('utf8') ?? '',
    value: message.value ?? new Uint8Array(0),
    headers,
    offset: `${partition}:${message.offset}`,
    timestamp: Number(message.timestamp),
  };
}

function headersToStrings(headers: IHeaders | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, raw] of Object.entries(headers ?? {})) {
    const value = Array.isArray(raw) ? raw[raw.length - 1] : raw;
    if (value !== undefined) out[name] = value.toString();
  }
  return out;
}
