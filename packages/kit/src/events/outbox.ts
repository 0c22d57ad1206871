/**
 * The transactional outbox: a service writes its events into its own store in the same transaction as the change
 * that caused them (`addToOutbox`), and `OutboxRelay` publishes them to the bus afterwards and deletes them.
 * Nothing is published for a change that rolled back, and nothing committed is lost: a relay that fails or
 * crashes between publish and delete publishes the same ids again (at least once; consumers dedupe by id).
 *
 * With several replicas of a service on one store (docs/delivery-guarantees.md):
 * - Order per key (the tenant) follows commit order: each event takes its `seq` from a per-key counter document
 *   written in the same transaction, so two transactions with events of one key serialise on it (SQLite's
 *   single writer; a MongoDB write conflict retries the later one) and the later commit gets the larger seq.
 * - One relay per store publishes: the replicas elect it with a lease document whose expiry each replica judges by
 *   its own clock (the holder's heartbeat stopped changing for `leaseMs`), never by comparing clocks across
 *   machines. Deleting a published batch is fenced by the lease generation, so a relay that lost the lease never
 *   deletes; its batch is published again by the new holder (a duplicate, which consumers drop by id).
 */
import { DuplicateKeyError, type CollectionDef, type Store, type StoreSession } from '../storage/types';
import { holderIsGone, holderStarted, holderStopped, LeaseWatch, monotonicNow, newHolderId } from '../lease';
import { publishTraced } from './tracing';
import { metrics } from '../metrics';
import type { BusErrorHandler, BusMessage, EventBus } from './types';

export interface OutboxRecord {
  /** The event id (BusMessage.id). */
  id: string;
  /** Relay order: increasing per key in commit order (see addToOutbox), near wall-clock microseconds otherwise. */
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

/** The last seq given to each key (id = the message key): what makes a key's order follow commit order. */
export interface OutboxKeyRecord {
  id: string;
  lastSeq: number;
}
export const outboxKeys: CollectionDef<OutboxKeyRecord> = { name: 'outbox_keys', sortField: 'id' };

/** The relay lease (one document): who relays, its generation (the fence) and its heartbeat. */
export interface OutboxLeaseRecord {
  id: string;
  owner: string;
  generation: number;
  beat: number;
}
export const outboxLease: CollectionDef<OutboxLeaseRecord> = { name: 'outbox_lease', sortField: 'id' };

/** The outbox's collections, created by the service runtime. */
export const OUTBOX_COLLECTIONS: Array<CollectionDef<any>> = [outboxCollection, outboxKeys, outboxLease];

let lastSeq = 0;
/**
 * Microseconds since epoch, bumped past the previous value: strictly increasing within a process even when many
 * events share a millisecond or the clock steps back. Stays below 2^53 until the year 2255.
 */
function nextSeq(): number {
  lastSeq = Math.max(Date.now() * 1000, lastSeq + 1);
  return lastSeq;
}

/**
 * Records `message` for publishing; call it with the transaction session of the change it announces. The key's
 * counter is read and moved in the same transaction: its seq is above every earlier commit of the key, whatever
 * this machine's clock says.
 */
export async function addToOutbox(tx: StoreSession, message: BusMessage): Promise<void> {
  const keys = tx.collection(outboxKeys);
  const counter = await keys.get(message.key);
  const seq = Math.max(nextSeq(), (counter?.lastSeq ?? 0) + 1);
  if (!counter) await keys.insert({ id: message.key, lastSeq: seq });
  else if (!(await keys.update(message.key, { lastSeq: counter.lastSeq }, { lastSeq: seq })))
    throw new Error('outbox key counter moved inside the transaction'); // cannot happen under the store's isolation
  await tx.collection(outboxCollection).insert({
    id: message.id,
    seq,
    topic: message.topic,
    key: message.key,
    value: Buffer.from(message.value.buffer, message.value.byteOffset, message.value.byteLength).toString('base64'),
    headers: { ...message.headers },
    createdAt: new Date().toISOString(),
  });
}

export interface OutboxRelayOptions {
  /**
   * Safety poll for records committed without a `notify()` (by another replica). Default 5000 ms when `wake` is
   * given (it tells of other processes' commits), else 1000 ms. Every write path of this process notifies at once.
   */
  intervalMs?: number;
  /** Records per publish. Default 100. */
  batchSize?: number;
  /** Relay failures; the records stay and are tried again on the next tick. */
  onError?: BusErrorHandler;
  /**
   * How long the relay lease's heartbeat may stand still before another replica takes over, measured on the
   * observer's own clock. Default 15 s. The holder beats every `leaseMs / 3`.
   */
  leaseMs?: number;
  /**
   * Subscribes to hints that another replica added to the outbox (`announce`), or that some process committed to the
   * store (`Store.watchWrites`); returns the unsubscribe function. Lets replicas that do not hold the lease have their
   * events relayed without waiting for the safety poll.
   */
  wake?: (hint: () => void) => () => void;
  /**
   * Tells the other replicas' relays (their `wake`) that this one added to the outbox while another holds the lease,
   * or that it handed the lease back. With it, `wake` need not follow every write to the store: a relay then wakes for
   * outbox records only, not for every commit of its replicas (storage/watch-writes.ts `sendSignal`).
   */
  announce?: () => void;
  /** Monotonic clock (ms), for tests. */
  now?: () => number;
}

const LEASE_ID = 'relay';
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
  private readonly leaseMs: number;
  /** A relay asked for by notify(), to run once this turn's I/O is done. */
  private soon: NodeJS.Immediate | null = null;
  private readonly now: () => number;
  private readonly wake: OutboxRelayOptions['wake'];
  private readonly announce: () => void;
  private unwake: (() => void) | null = null;
  /** This relay's identity in the lease: host/pid/random (unique per relay instance, not per process). */
  readonly owner = newHolderId();
  /** The generation this relay holds, or null. */
  private generation: number | null = null;
  private lastBeatAt = 0;
  /** Other holders' leases as this relay saw them, on its own clock (the rule of kit lease.ts). */
  private readonly watch: LeaseWatch;

  constructor(
    private readonly store: Store,
    private readonly bus: EventBus,
    options: OutboxRelayOptions = {},
  ) {
    this.intervalMs = options.intervalMs ?? (options.wake ? 5000 : 1000);
    this.batchSize = options.batchSize ?? 100;
    this.onError = options.onError ?? (() => {});
    this.leaseMs = options.leaseMs ?? 15_000;
    this.wake = options.wake;
    this.announce = options.announce ?? (() => {});
    this.now = options.now ?? monotonicNow;
    this.watch = new LeaseWatch(this.now);
  }

  /** True while this relay holds the lease (as of its last look). */
  get leading(): boolean {
    return this.generation !== null;
  }

  start(): void {
    if (this.timer || this.stopped) return;
    holderStarted(this.owner);
    // The holder must beat well within the lease, whatever the poll interval.
    this.timer = setInterval(() => void this.tick(), Math.min(this.intervalMs, Math.floor(this.leaseMs / 3)));
    this.timer.unref(); // the service's servers keep the process alive, not the relay
    // Not notify(): a hint announces nothing, or two replicas without the lease would wake each other forever.
    this.unwake = this.wake?.(() => this.relaySoon()) ?? null;
    void this.tick();
  }

  /**
   * Call after committing a transaction that added to the outbox: relays now instead of on the next tick. "Now" is
   * after the I/O of this turn of the event loop: the commits of concurrent requests handled meanwhile go out in the
   * same batch (one read, one publish, one delete) instead of one batch each.
   */
  notify(): void {
    if (this.stopped) return;
    // The holder relays this replica's records: wake it now (a lost signal leaves them to its safety poll).
    if (this.generation === null) this.announce();
    this.relaySoon();
  }

  /** A relay run once this turn's I/O is done (one for any number of asks in the turn). */
  private relaySoon(): void {
    if (this.stopped || this.soon) return;
    this.soon = setImmediate(() => {
      this.soon = null;
      void this.tick();
    });
  }

  /** Stops polling, relays once more (when leading) and hands the lease back at once for another replica. */
  async stop(): Promise<void> {
    this.stopped = true;
    holderStopped(this.owner);
    clearInterval(this.timer);
    clearImmediate(this.soon ?? undefined);
    this.soon = null;
    this.timer = undefined;
    this.unwake?.();
    this.unwake = null;
    try {
      await this.flush();
      await this.exclusive(() => this.release());
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
    const wasLeading = this.generation !== null;
    if (!(await this.lead())) {
      if (wasLeading) this.announce(); // the lease went to another replica: wake it for what this one left
      return;
    }
    while ((await this.relayBatch()) === this.batchSize) {
      // a full batch: more may be waiting
    }
  }

  /**
   * Holds or takes the lease; true when this relay may publish. The holder beats (a compare-and-set on its
   * generation) at most every leaseMs / 3. Another replica takes over only after seeing the same generation and
   * beat for `leaseMs` on its own clock, so clocks that disagree between machines do not matter.
   */
  private async lead(): Promise<boolean> {
    const leases = this.store.collection(outboxLease);
    const now = this.now();
    if (this.generation !== null) {
      if (now - this.lastBeatAt < this.leaseMs / 3) return true;
      return this.beat();
    }
    const current = await leases.get(LEASE_ID);
    if (!current) {
      try {
        await leases.insert({ id: LEASE_ID, owner: this.owner, generation: 1, beat: 0 });
        return this.holding(1, now);
      } catch (err) {
        if (err instanceof DuplicateKeyError) return false; // another replica was first
        throw err;
      }
    }
    if (current.owner === this.owner) return this.holding(current.generation, now); // released or restarted view
    // An empty owner is a lease handed back on shutdown: take it at once.
    const stale =
      current.owner === '' ||
      holderIsGone(current.owner) ||
      this.watch.stale(LEASE_ID, `${current.generation}:${current.beat}`, this.leaseMs);
    if (!stale) return false;
    const next = current.generation + 1;
    const taken = await leases.update(
      LEASE_ID,
      { generation: current.generation, beat: current.beat },
      { owner: this.owner, generation: next, beat: 0 },
    );
    return taken ? this.holding(next, now) : false;
  }

  private holding(generation: number, now: number): boolean {
    this.generation = generation;
    this.lastBeatAt = now;
    this.watch.forget(LEASE_ID);
    return true;
  }

  /** The holder's heartbeat: fails (and gives up leading) when another replica took the lease. */
  private async beat(tx?: StoreSession): Promise<boolean> {
    const generation = this.generation;
    if (generation === null) return false;
    const leases = (tx ?? this.store).collection(outboxLease);
    const current = await leases.get(LEASE_ID);
    const ok =
      current?.owner === this.owner &&
      current.generation === generation &&
      (await leases.update(LEASE_ID, { owner: this.owner, generation, beat: current.beat }, { beat: current.beat + 1 })) !== null;
    if (ok) this.lastBeatAt = this.now();
    else this.generation = null;
    return ok;
  }

  /** Hands the lease back (owner ''), so another replica relays at once instead of after `leaseMs`. */
  private async release(): Promise<void> {
    const generation = this.generation;
    if (generation === null) return;
    this.generation = null;
    await this.store.collection(outboxLease).update(LEASE_ID, { owner: this.owner, generation }, { owner: '' });
    this.announce(); // another replica takes it at once, not at its next safety poll
  }

  /** Oldest first: publish as one batch, then delete. A crash in between republishes the same ids. */
  private async relayBatch(): Promise<number> {
    const outbox = this.store.collection(outboxCollection);
    // Durable: only records a majority of replicas hold. A record read from the primary alone could be rolled back
    // by a failover after it was published: an event for a change that never happened.
    // Every record has a seq: the range says so, and spares the query for records without one.
    const { items } = await outbox.find({}, { order: 'asc', limit: this.batchSize, durable: true, range: { gte: 0 } });
    if (items.length === 0) return 0;
    await publishTraced(
      this.bus,
      items.map((r) => ({
        id: r.id,
        topic: r.topic,
        key: r.key,
        value: Buffer.from(r.value, 'base64'),
        headers: r.headers,
      })),
    );
    // Fenced: the delete commits only with the lease still ours. A relay that lost it deletes nothing, and the
    // holder publishes the batch again (a duplicate by id, never a loss).
    const fenced = await this.store.transaction(async (tx) => {
      if (!(await this.beat(tx))) return false;
      const c = tx.collection(outboxCollection);
      for (const r of items) await c.delete(r.id);
      return true;
    });
    if (!fenced) return 0;
    metrics.outboxPublished.inc(items.length);
    metrics.outboxLag.set(Math.max(0, (Date.now() - Date.parse(items[0].createdAt)) / 1000));
    return items.length;
  }
}
