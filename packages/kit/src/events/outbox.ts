/**
 * The transactional outbox: a service writes its events into its own store in the same transaction as the change
 * that caused them (`addToOutbox`), and `OutboxRelay` publishes them to the bus afterwards and deletes them.
 * Nothing is published for a change that rolled back, and nothing committed is lost: a relay that fails or
 * crashes between publish and delete publishes the same ids again (at least once; consumers dedupe by id).
 */
import type { CollectionDef, Store, StoreSession } from '../storage/types';
import type { BusErrorHandler, BusMessage, EventBus } from './types';

export interface OutboxRecord {
  /** The event id (BusMessage.id). */
  id: string;
  /** Relay order: increasing within a process (see nextSeq). */
  seq: number;
  topic: string;
  key: string;
  /** BusMessage.value, base64. */
  value: string;
  headers: Record<string, string>;
  createdAt: string;
}

export const outboxCollection: CollectionDef<OutboxRecord> = {
  name: 'outbox',
  indexes: [{ fields: ['seq'] }],
  sortField: 'seq',
};

let lastSeq = 0;
/**
 * Microseconds since epoch, bumped past the previous value: strictly increasing within a process even when many
 * events share a millisecond or the clock steps back. Stays below 2^53 until the year 2255.
 */
function nextSeq(): number {
  lastSeq = Math.max(Date.now() * 1000, lastSeq + 1);
  return lastSeq;
}

/** Records `message` for publishing; call it with the transaction session of the change it announces. */
export async function addToOutbox(tx: StoreSession, message: BusMessage): Promise<void> {
  await tx.collection(outboxCollection).insert({
    id: message.id,
    seq: nextSeq(),
    topic: message.topic,
    key: message.key,
    value: Buffer.from(message.value.buffer, message.value.byteOffset, message.value.byteLength).toString('base64'),
    headers: { ...message.headers },
    createdAt: new Date().toISOString(),
  });
}

export interface OutboxRelayOptions {
  /**
   * Safety poll for records committed without a `notify()` (or by another replica). Default 1000 ms: every write
   * path of this process notifies at once, so an idle service does not poll its store 20 times a second.
   */
  intervalMs?: number;
  /** Records per publish. Default 100. */
  batchSize?: number;
  /** Relay failures; the records stay and are tried again on the next tick. */
  onError?: BusErrorHandler;
}

export class OutboxRelay {
  private readonly intervalMs: number;
  private readonly batchSize: number;
  private readonly onError: BusErrorHandler;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** Serialises relay runs: only one at a time in this process. */
  private lock: Promise<unknown> = Promise.resolve();
  /** A run already waiting for the lock; further notifications join it instead of queueing more. */
  private queued: Promise<void> | null = null;

  constructor(
    private readonly store: Store,
    private readonly bus: EventBus,
    options: OutboxRelayOptions = {},
  ) {
    this.intervalMs = options.intervalMs ?? 1000;
    this.batchSize = options.batchSize ?? 100;
    this.onError = options.onError ?? (() => {});
  }

  start(): void {
    if (this.timer || this.stopped) return;
    this.timer = setInterval(() => void this.tick(), this.intervalMs);
    this.timer.unref(); // the service's servers keep the process alive, not the relay
    void this.tick();
  }

  /** Call after committing a transaction that added to the outbox: relays at once instead of on the next tick. */
  notify(): void {
    if (!this.stopped) void this.tick();
  }

  /** Stops polling and relays once more; a failure is reported and the records wait for the next start. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    this.timer = undefined;
    try {
      await this.flush();
    } catch (err) {
      this.onError(err);
    }
  }

  /** Relays everything pending now (after any run in progress); rejects when publishing fails. */
  flush(): Promise<void> {
    return this.exclusive(() => this.drain());
  }

  private tick(): Promise<void> {
    this.queued ??= this.exclusive(async () => {
      this.queued = null; // notifications from now on need another run
      await this.drain();
    }).catch((err: unknown) => this.onError(err));
    return this.queued;
  }

  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.lock.then(fn);
    this.lock = run.catch(() => {});
    return run;
  }

  private async drain(): Promise<void> {
    while ((await this.relayBatch()) === this.batchSize) {
      // a full batch: more may be waiting
    }
  }

  /** Oldest first: publish as one batch, then delete. A crash in between republishes the same ids. */
  private async relayBatch(): Promise<number> {
    const outbox = this.store.collection(outboxCollection);
    const { items } = await outbox.find({}, { order: 'asc', limit: this.batchSize });
    if (items.length === 0) return 0;
    await this.bus.publish(
      items.map((r) => ({
        id: r.id,
        topic: r.topic,
        key: r.key,
        value: Buffer.from(r.value, 'base64'),
        headers: r.headers,
      })),
    );
    await this.store.transaction(async (tx) => {
      const c = tx.collection(outboxCollection);
      for (const r of items) await c.delete(r.id);
    });
    return items.length;
  }
}
