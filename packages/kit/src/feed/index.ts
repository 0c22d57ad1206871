/**
 * A change feed a service keeps for the gateways: small entries (kind, subject id, time) appended in the same
 * transaction as the change they describe, read in order by `seq` (ListX), and announced over a server stream
 * (WatchX) so that a gateway reads when there is something to read instead of polling. Identity's revocation feed
 * (revocations, and `tenant_changed`) and projects' change feed (for the gateway's project cache) are two of them.
 *
 * `seq` follows commit order (a head document moved in the entry's transaction, see recordFeedEntry): readers ask
 * for everything after the last entry they saw, starting from the oldest entry kept, and never depend on clocks.
 */
import { untraced } from '../untraced';
import type { Logger } from '../logger';
import { encodeCursor } from '../storage/cursor';
import { DuplicateKeyError, type CollectionDef, type Store, type StoreSession } from '../storage/types';
import { newId, nowIso } from '../ids';

export interface FeedEntryDoc {
  id: string;
  seq: number;
  kind: string;
  subjectId: string;
  /** Unix ms of the change. */
  at: number;
  createdAt: string;
}

export interface FeedEntry {
  seq: number;
  kind: string;
  subjectId: string;
  at: number;
}

/** The collection of a feed, ordered by `seq`. */
export function feedCollection<T extends FeedEntryDoc = FeedEntryDoc>(name: string): CollectionDef<T> {
  return { name, sortField: 'seq', indexes: [{ fields: [] }] };
}

/** The last `seq` given in each feed (id = the feed's collection name): what makes a feed's order commit order. */
export interface FeedHeadDoc {
  id: string;
  lastSeq: number;
}
export const feedHeads: CollectionDef<FeedHeadDoc> = { name: 'feed_heads', sortField: 'id' };

let lastClockSeq = 0;

/**
 * Moves the head document `headId` one past its last sequence number (at least `floor`), inside the caller's
 * transaction, and returns the new number. Two writers serialise on the head (SQLite's single writer; a MongoDB
 * write conflict retries the later one), so the numbers handed out follow commit order: once a reader sees one
 * committed, every lower one is committed too, whatever the writers' clocks say.
 */
export async function advanceHead(tx: StoreSession, headId: string, floor = 0): Promise<number> {
  const heads = tx.collection(feedHeads);
  const head = await heads.get(headId);
  const seq = Math.max(floor, (head?.lastSeq ?? 0) + 1);
  if (!head) await heads.insert({ id: headId, lastSeq: seq });
  else if (!(await heads.update(headId, { lastSeq: head.lastSeq }, { lastSeq: seq })))
    throw new Error('feed head moved inside the transaction'); // cannot happen under the store's isolation
  return seq;
}

/**
 * Appends an entry, inside the transaction of the change it describes. Its `seq` is above the feed's head, which
 * the same transaction moves (advanceHead), so `seq` order is commit order and a reader that asks for entries after
 * the last `seq` it saw misses none. (Near the writer's clock in microseconds otherwise.)
 */
export async function recordFeedEntry<T extends FeedEntryDoc>(
  tx: StoreSession,
  def: CollectionDef<T>,
  kind: T['kind'],
  subjectId: string,
): Promise<T> {
  const at = Date.now();
  lastClockSeq = Math.max(at * 1000, lastClockSeq + 1);
  const seq = await advanceHead(tx, def.name, lastClockSeq);
  const doc = { id: newId('fe'), seq, kind, subjectId, at, createdAt: nowIso() } as T;
  await tx.collection(def).insert(doc);
  return doc;
}

/**
 * Creates a head document if it is missing (outside any transaction), so that two first writers at once do not
 * both insert it (a duplicate key would doom one writer's transaction).
 */
export async function ensureHead(store: Store, headId: string): Promise<void> {
  if (await store.collection(feedHeads).get(headId)) return;
  try {
    await store.collection(feedHeads).insert({ id: headId, lastSeq: 0 });
  } catch (err) {
    if (!(err instanceof DuplicateKeyError)) throw err;
  }
}

/** The feed's head document, created at start-up (see ensureHead). */
export function ensureFeedHead<T extends FeedEntryDoc>(store: Store, def: CollectionDef<T>): Promise<void> {
  return ensureHead(store, def.name);
}

/** The most entries one read of a feed returns: a shorter page is the feed's end (readers page until they get one). */
export const FEED_PAGE_SIZE = 1000;

/** The page a reader asked for (ListX's `limit`): 0 or out of range is the largest, FEED_PAGE_SIZE. */
export const feedPageSize = (limit = 0) => (limit > 0 && limit < FEED_PAGE_SIZE ? Math.floor(limit) : FEED_PAGE_SIZE);

/** Entries after `afterSeq`, oldest first, at most `limit` (up to FEED_PAGE_SIZE), and the last sequence number read. */
export async function readFeed<T extends FeedEntryDoc>(
  store: Store,
  def: CollectionDef<T>,
  afterSeq: number,
  limit?: number,
): Promise<{ entries: FeedEntry[]; lastSeq: number }> {
  const cursor = afterSeq > 0 ? encodeCursor(afterSeq, '\uffff') : null;
  // Durable (MongoDB: majority): an entry a failover rolls back would leave readers past a seq that the next
  // entry then takes again, and they would never read that entry (a revocation no gateway enforces).
  const page = await store.collection(def).find({}, { order: 'asc', limit: feedPageSize(limit), cursor, durable: true });
  const entries = page.items.map((r) => ({ seq: r.seq, kind: r.kind, subjectId: r.subjectId, at: r.at }));
  return { entries, lastSeq: entries.length ? entries[entries.length - 1].seq : afterSeq };
}

type Notify = () => void;

export interface FeedNotifierOptions {
  pollMs: number;
  logger: Logger;
  /** How long entries are kept (default 3 h). */
  retainMs?: number;
  /** The store's write hints (`Store.watchWrites`): other replicas' entries are looked for on each. */
  wake?: (hint: () => void) => () => void;
}

/** Longer than any reader looks back (gateways: 2 h, beyond the longest access token). */
const RETAIN_MS = 3 * 3600_000;
const PRUNE_EVERY_MS = 10 * 60_000;
/** Beside write notices, which are hints (one can be missed). */
const SAFETY_POLL_MS = 5000;

/**
 * Tells the gateways that watch a feed when entries may have been appended. An entry written by this process
 * notifies at once (`announce`); one written by another replica is found by a cheap read of the newest sequence
 * number, which runs only while some gateway is watching this replica: after every commit to the store when `wake`
 * reports them (the embedded store), with a safety poll every few seconds beside it; every `pollMs` otherwise.
 */
export class FeedNotifier<T extends FeedEntryDoc = FeedEntryDoc> {
  private readonly watchers = new Set<Notify>();
  /** Ends every open watch (the server is stopping: its streams must not hold the drain). */
  private readonly ending = new AbortController();
  private timer: NodeJS.Timeout | null = null;
  private unwake: (() => void) | null = null;
  private newestSeq: number | null = null;
  private prunedAt = Date.now();

  constructor(
    private readonly store: Store,
    private readonly def: CollectionDef<T>,
    private readonly options: FeedNotifierOptions,
  ) {}

  /** A notifier for the feed, its head document created first (see ensureFeedHead): how a service opens its feed. */
  static async open<T extends FeedEntryDoc>(store: Store, def: CollectionDef<T>, options: FeedNotifierOptions): Promise<FeedNotifier<T>> {
    await ensureFeedHead(store, def);
    return new FeedNotifier(store, def, options);
  }

  /** The feed's WatchX server-stream handler (request and context unused: every watcher hears of every entry). */
  readonly serveWatch = (
    _req: unknown,
    _ctx: unknown,
    send: (notice: { at: number }) => Promise<void>,
    signal: AbortSignal,
  ): Promise<void> => this.watch(send, signal);

  /** After appending an entry: every watcher hears of it now. Now and then, entries no reader needs go. */
  announce(): void {
    for (const notify of this.watchers) notify();
    if (Date.now() - this.prunedAt > PRUNE_EVERY_MS) {
      this.prunedAt = Date.now();
      void untraced(() => this.prune()).catch((err: unknown) =>
        this.options.logger.warn({ err, feed: this.def.name }, 'feed prune failed'),
      );
    }
  }

  /** Deletes entries older than `retainMs` (several replicas may do it at once: deleting by id is idempotent). */
  async prune(): Promise<number> {
    const cutoff = Date.now() - (this.options.retainMs ?? RETAIN_MS);
    let deleted = 0;
    for (;;) {
      const page = await this.store.collection(this.def).find({}, { order: 'asc', limit: 500 });
      const old = page.items.filter((e) => e.at < cutoff);
      for (const e of old) if (await this.store.collection(this.def).delete(e.id)) deleted++;
      if (old.length < page.items.length || old.length === 0) return deleted;
    }
  }

  /**
   * Serves one watcher until `signal` aborts: a notice at once (to read what it missed), then one after every change.
   * Notices meanwhile a slow reader's stream is full are folded into one sent when it drains: a notice only says
   * "read", so a burst of changes queues at most one more, never one per change.
   */
  async watch(send: (notice: { at: number }) => Promise<void>, signal: AbortSignal): Promise<void> {
    let sending = false;
    let again = false;
    const notify = () => {
      if (sending) {
        again = true;
        return;
      }
      sending = true;
      void (async () => {
        do {
          again = false;
          await send({ at: Date.now() });
        } while (again);
        sending = false;
      })();
    };
    this.watchers.add(notify);
    this.pollWhileWatched();
    try {
      notify();
      const done = AbortSignal.any([signal, this.ending.signal]);
      await new Promise<void>((resolve) => (done.aborted ? resolve() : done.addEventListener('abort', () => resolve(), { once: true })));
    } finally {
      this.watchers.delete(notify);
      if (this.watchers.size === 0) this.stopLooking();
    }
  }

  /** Ends every watch (each stream closes with OK; gateways reconnect to another replica) and stops reading. */
  stop(): void {
    this.ending.abort();
    this.stopLooking();
  }

  private pollWhileWatched(): void {
    if (this.timer) return;
    const { wake, pollMs } = this.options;
    this.unwake = wake?.(() => void this.lookForOthers()) ?? null;
    this.timer = setInterval(() => void this.lookForOthers(), wake ? Math.max(pollMs, SAFETY_POLL_MS) : pollMs);
    this.timer.unref();
  }

  private stopLooking(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.unwake?.();
    this.unwake = null;
  }

  /** Entries appended by other replicas: the newest sequence number moved. */
  private async lookForOthers(): Promise<void> {
    try {
      const page = await untraced(() => this.store.collection(this.def).find({}, { order: 'desc', limit: 1 }));
      const seq = page.items[0]?.seq ?? 0;
      if (this.newestSeq !== null && seq !== this.newestSeq) this.announce();
      this.newestSeq = seq;
    } catch (err) {
      this.options.logger.warn({ err, feed: this.def.name }, 'feed read failed');
    }
  }
}
