/**
 * The embedded event bus: a durable log in one SQLite file that every process of one machine opens at once
 * (`DATA_DIR/bus.db`). SQLite serialises writers, so `seq` (AUTOINCREMENT) is assigned in commit order and a
 * reader never sees a later seq before an earlier one: consumers can simply read "after my committed seq".
 *
 * Supported setup: one consumer per group per machine. Other subscriptions of the same group (in this process
 * or another) are standbys: a lease row per (group, topic) lets only one of them consume at a time. A crashed
 * owner's lease is taken at once (its process is gone: lease.ts), a hung one's when it expires (30 s).
 *
 * Retention: nothing is deleted automatically. `prune()` exists for an operator or a future job; note that a
 * pruned message id can no longer be deduplicated on re-publish.
 */
import Database from 'better-sqlite3';
import { metrics } from '../metrics';
import { checkpointElsewhere, walClosed, walWritten } from '../storage/checkpointer';
import { sendSignal, watchSignal } from '../storage/watch-writes';
import { useWal } from '../storage/wal';
import { holderIsGone, holderStarted, holderStopped, newHolderId } from '../lease';
import { isPoison } from './poison';
import { Stalls } from './stalls';
import type { BusErrorHandler, BusMessage, EventBus, ReceivedMessage, StalledConsumer, SubscribeOptions, Subscription } from './types';

export interface EmbeddedBusOptions {
  path: string;
  /**
   * Idle safety poll. Default 5000 ms: consumers wake as soon as any process publishes to one of their topics (the
   * publisher writes the topic's signal file, which they watch), so the poll only covers a missed notification.
   */
  pollIntervalMs?: number;
  /**
   * A group's lease lasts this long without renewal before another consumer may take it. Default 30 s; renewed every
   * third of it. An owner whose process is gone loses it at once.
   */
  leaseMs?: number;
  /** Failed handler calls (retried) and polling failures; the bus has no logger of its own. */
  onError?: BusErrorHandler;
  /**
   * Handler calls a poison message (its handler threw a PoisonMessageError) gets before it is set aside as a dead
   * letter (`deadLetters()`, replayed with `replayDeadLetter`), so it cannot hold its group forever. Default 5.
   * Other errors (an unavailable dependency) are retried without limit.
   */
  maxAttempts?: number;
  /** Cap of the retry backoff (100 ms doubling). Default 5000. */
  retryMaxMs?: number;
}

/** A poison message a group set aside after `attempts` failed handler calls. */
export interface DeadLetter {
  group: string;
  topic: string;
  seq: number;
  id: string;
  attempts: number;
  error: string;
  failedAt: string;
}

const BATCH_SIZE = 200;
/**
 * A batch's handled messages are committed at its end, or after this long inside a long batch (the Kafka adapter's
 * COMMIT_EVERY_MS): one commit (and one wake-up of every process watching the log) per batch, not per message. A crash
 * redelivers what was handled since the last commit, which consumers must take anyway (at least once).
 */
const COMMIT_EVERY_MS = 1000;
const RETRY_MIN_MS = 100;
/** Wait after an error of the loop itself (e.g. the file stayed locked past busy_timeout). */
const LOOP_ERROR_WAIT_MS = 1000;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS messages (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  topic TEXT NOT NULL,
  key TEXT NOT NULL,
  value BLOB NOT NULL,
  headers TEXT NOT NULL,
  ts INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_topic_seq ON messages (topic, seq);
CREATE TABLE IF NOT EXISTS offsets (grp TEXT NOT NULL, topic TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (grp, topic));
CREATE TABLE IF NOT EXISTS dead_letters (
  grp TEXT NOT NULL, topic TEXT NOT NULL, seq INTEGER NOT NULL, id TEXT NOT NULL, attempts INTEGER NOT NULL,
  error TEXT NOT NULL, failed_at TEXT NOT NULL, PRIMARY KEY (grp, topic, seq)
);
CREATE TABLE IF NOT EXISTS replays (grp TEXT NOT NULL, topic TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (grp, topic, seq));
`;
/**
 * Consumer-group leases live in a file of their own (`<name>-leases.db`, attached): renewing them every few seconds
 * must not touch the log's WAL, which every consumer of every process watches to wake up (see watchWrites).
 */
const LEASES_SCHEMA = `
CREATE TABLE IF NOT EXISTS state.leases (
  grp TEXT NOT NULL, topic TEXT NOT NULL, owner TEXT NOT NULL, expires INTEGER NOT NULL, PRIMARY KEY (grp, topic)
);
`;

/**
 * The file a publish to `topic` writes after its commit, to wake the processes consuming it (and only those): the
 * log's own WAL changes on every offset commit and every topic, and watching it woke every consuming process of the
 * machine on each. `<dir>/bus.db` -> `<dir>/bus.db-signals/<topic>`.
 */
export function topicSignalPath(path: string, topic: string): string {
  return `${path}-signals/${encodeURIComponent(topic)}`;
}

/**
 * The topics of the messages past a seq, for waking consumers. A range on the rowid, read in seq order: the obvious
 * `GROUP BY topic` makes SQLite scan the whole (topic, seq) index instead (tested in embedded.test.ts).
 */
export const TOPICS_AFTER_SQL = `SELECT seq, topic FROM messages WHERE seq > ? ORDER BY seq`;

interface Row {
  seq: number;
  id: string;
  topic: string;
  key: string;
  value: Buffer;
  headers: string;
  ts: number;
}

/** A row of the log as a consumer receives it. */
function received(r: Row): ReceivedMessage & { seq: number } {
  return {
    seq: r.seq,
    id: r.id,
    topic: r.topic,
    key: r.key,
    value: r.value,
    headers: JSON.parse(r.headers) as Record<string, string>,
    offset: String(r.seq),
    timestamp: r.ts,
  };
}

/** `<dir>/bus.db` -> `<dir>/bus-leases.db`. */
function leasesPath(path: string): string {
  return path.replace(/(\.db)?$/, '-leases.db');
}

export function openEmbeddedBus(options: EmbeddedBusOptions): EmbeddedBus {
  return new EmbeddedBus(options);
}

export class EmbeddedBus implements EventBus {
  readonly kind = 'embedded' as const;
  readonly pollIntervalMs: number;
  readonly leaseMs: number;
  readonly maxAttempts: number;
  readonly retryMaxMs: number;
  readonly onError: BusErrorHandler;
  private readonly db: Database.Database;
  private readonly subscriptions = new Set<EmbeddedSubscription>();
  private closed = false;
  private readonly dbPath: string;
  /** The in-memory log's own watch (a file's is shared by the buses of the process: `LogWatch.of`). */
  private memoryWatch: LogWatch | null = null;

  private readonly insert: Database.Statement;
  private readonly initOffset: Database.Statement;
  private readonly readAfterOffset: Database.Statement;
  private readonly readLease: Database.Statement;
  private readonly upsertLease: Database.Statement;
  private readonly renewOwnLease: Database.Statement;
  private readonly releaseLease: Database.Statement;
  private readonly advanceOffset: Database.Statement;
  private readonly topicsAfter: Database.Statement;
  private readonly groupsWithReplays: Database.Statement;
  private readonly replayStatements = new Map<number, Database.Statement>();
  private readonly deleteReplay: Database.Statement;
  private readonly lastSeq: Database.Statement;
  private readonly insertMany: (messages: BusMessage[], ts: number) => void;
  private readonly commitTx: (grp: string, positions: Map<string, number>, owner: string, expires: number) => string[];

  constructor(options: EmbeddedBusOptions) {
    this.pollIntervalMs = options.pollIntervalMs ?? 5000;
    this.dbPath = options.path;
    this.leaseMs = options.leaseMs ?? 30_000;
    this.maxAttempts = options.maxAttempts ?? 5;
    this.retryMaxMs = options.retryMaxMs ?? 5000;
    this.onError = options.onError ?? (() => {});
    this.db = new Database(options.path);
    // busy_timeout first: the other processes may hold the write lock while we switch to WAL or create tables.
    this.db.pragma('busy_timeout = 5000');
    useWal(this.db);
    this.db.pragma('synchronous = NORMAL');
    // Checkpoints of the log run in the checkpointer's thread (publishes and offset commits tell it).
    checkpointElsewhere(this.db, options.path);
    this.db.exec(SCHEMA);
    this.db.prepare('ATTACH DATABASE ? AS state').run(options.path === ':memory:' ? ':memory:' : leasesPath(options.path));
    useWal(this.db, 'state');
    this.db.exec('PRAGMA state.synchronous = NORMAL;');
    this.db.exec(LEASES_SCHEMA);

    this.insert = this.db.prepare(`INSERT OR IGNORE INTO messages (id, topic, key, value, headers, ts) VALUES (?, ?, ?, ?, ?, ?)`);
    // A new group starts at the beginning or at the current end; an existing group keeps its position.
    this.initOffset = this.db.prepare(
      `INSERT OR IGNORE INTO offsets (grp, topic, seq)
       VALUES (?, ?, CASE WHEN ? THEN 0 ELSE (SELECT COALESCE(MAX(seq), 0) FROM messages) END)`,
    );
    this.readAfterOffset = this.db.prepare(
      `SELECT seq, id, topic, key, value, headers, ts FROM messages
       WHERE topic = ? AND seq > COALESCE((SELECT seq FROM offsets WHERE grp = ? AND topic = ?), 0)
       ORDER BY seq LIMIT ${BATCH_SIZE}`, // a literal: a bound LIMIT makes SQLite prepare the statement again each run
    );
    this.readLease = this.db.prepare(`SELECT owner, expires FROM state.leases WHERE grp = ? AND topic = ?`);
    // Take the lease when it is free, ours, or expired; one statement, so two processes cannot both win.
    this.upsertLease = this.db.prepare(
      `INSERT INTO state.leases (grp, topic, owner, expires) VALUES (@grp, @topic, @owner, @expires)
       ON CONFLICT (grp, topic) DO UPDATE SET owner = excluded.owner, expires = excluded.expires
       WHERE leases.owner = excluded.owner OR leases.expires <= @now OR leases.owner = @gone`,
    );
    this.renewOwnLease = this.db.prepare(`UPDATE state.leases SET expires = ? WHERE grp = ? AND topic = ? AND owner = ?`);
    this.releaseLease = this.db.prepare(`DELETE FROM state.leases WHERE grp = ? AND topic = ? AND owner = ?`);
    // Never move a group backwards (a stale owner finishing late must not rewind the new owner).
    this.advanceOffset = this.db.prepare(`UPDATE offsets SET seq = ? WHERE grp = ? AND topic = ? AND seq < ?`);

    this.topicsAfter = this.db.prepare(TOPICS_AFTER_SQL);
    this.groupsWithReplays = this.db.prepare(`SELECT DISTINCT grp FROM replays`).pluck();
    this.deleteReplay = this.db.prepare(`DELETE FROM replays WHERE grp = ? AND topic = ? AND seq = ?`);
    this.lastSeq = this.db.prepare(`SELECT COALESCE(MAX(seq), 0) FROM messages`).pluck();

    this.insertMany = this.db.transaction((messages: BusMessage[], ts: number) => {
      for (const m of messages) {
        const value = Buffer.from(m.value.buffer, m.value.byteOffset, m.value.byteLength);
        this.insert.run(m.id, m.topic, m.key, value, JSON.stringify(m.headers ?? {}), ts);
      }
    });
    // An offset only moves while we still own its topic's lease; committing also renews it. Answers the topics lost.
    const commit = this.db.transaction((grp: string, positions: Map<string, number>, owner: string, expires: number) => {
      const lost: string[] = [];
      for (const [topic, seq] of positions) {
        if (this.renewOwnLease.run(expires, grp, topic, owner).changes !== 1) lost.push(topic);
        else this.advanceOffset.run(seq, grp, topic, seq);
      }
      return lost;
    });
    this.commitTx = (...args) => commit.immediate(...args);
  }

  /** Sets a message aside for its group (it stays in the log; the group's offset moves past it). */
  setAside(group: string, message: ReceivedMessage, seq: number, attempts: number, error: unknown): void {
    this.db
      .prepare(`INSERT OR REPLACE INTO dead_letters (grp, topic, seq, id, attempts, error, failed_at) VALUES (?, ?, ?, ?, ?, ?, ?)`)
      .run(
        group,
        message.topic,
        seq,
        message.id,
        attempts,
        String((error as Error)?.message ?? error).slice(0, 500),
        new Date().toISOString(),
      );
  }

  /** Dead letters, oldest first (of one group, or all). */
  deadLetters(group?: string): DeadLetter[] {
    const rows = this.db
      .prepare(
        `SELECT grp AS "group", topic, seq, id, attempts, error, failed_at AS failedAt FROM dead_letters
         WHERE ? IS NULL OR grp = ? ORDER BY failed_at, seq`,
      )
      .all(group ?? null, group ?? null) as DeadLetter[];
    return rows;
  }

  /** Queues a dead letter for its group again (delivered before the group's next messages); false if unknown. */
  replayDeadLetter(group: string, topic: string, seq: number): boolean {
    const queued = this.db
      .transaction(() => {
        const removed = this.db.prepare(`DELETE FROM dead_letters WHERE grp = ? AND topic = ? AND seq = ?`).run(group, topic, seq);
        if (removed.changes !== 1) return false;
        this.db.prepare(`INSERT OR IGNORE INTO replays (grp, topic, seq) VALUES (?, ?, ?)`).run(group, topic, seq);
        return true;
      })
      .immediate();
    if (queued) {
      this.signal([topic]);
      this.watch(false)?.announce();
    }
    return queued;
  }

  /** Replays queued for a group's topics, with their messages. */
  readReplays(group: string, topics: string[]): Array<ReceivedMessage & { seq: number }> {
    let statement = this.replayStatements.get(topics.length);
    if (!statement) {
      statement = this.db.prepare(
        `SELECT m.seq, m.id, m.topic, m.key, m.value, m.headers, m.ts FROM replays r JOIN messages m ON m.seq = r.seq
         WHERE r.grp = ? AND r.topic IN (${topics.map(() => '?').join(',')}) ORDER BY r.seq LIMIT 50`,
      );
      this.replayStatements.set(topics.length, statement);
    }
    return (statement.all(group, ...topics) as Row[]).map(received);
  }

  replayDone(group: string, topic: string, seq: number): void {
    this.deleteReplay.run(group, topic, seq);
    for (const s of this.subscriptions) s.wake();
  }

  async publish(messages: BusMessage[]): Promise<void> {
    this.assertOpen();
    if (messages.length === 0) return;
    // A duplicate id is ignored: the outbox relay may publish the same record again after a crash.
    this.insertMany(messages, Date.now());
    walWritten(this.dbPath);
    this.signal(new Set(messages.map((m) => m.topic)));
    // This process's consumers of these topics start now, not when the signal reaches the watch.
    this.watch(false)?.announce();
  }

  /** Wakes the other processes' consumers of these topics (after the commit, so they find what woke them). */
  private signal(topics: Iterable<string>): void {
    if (this.dbPath === ':memory:') return;
    for (const topic of topics) sendSignal(topicSignalPath(this.dbPath, topic));
  }

  /** The watch of this bus's log in this process; `create`: make it when no bus of the process has one yet. */
  private watch(create: boolean): LogWatch | undefined {
    if (this.dbPath === ':memory:') return (this.memoryWatch ??= new LogWatch(null, () => undefined));
    return LogWatch.of(this.dbPath, create);
  }

  // --- used by LogWatch ---

  /** The highest seq in the log now. */
  highestSeq(): number {
    return (this.lastSeq.get() as number | undefined) ?? 0;
  }

  /** The topics with messages past `seq` (and the highest seq among them), and the groups with replays queued. */
  newSince(seq: number): { seq: number; topics: Set<string>; groups: Set<string> } {
    const rows = this.topicsAfter.all(seq) as Array<{ topic: string; seq: number }>;
    return {
      seq: rows.length ? rows[rows.length - 1].seq : seq,
      topics: new Set(rows.map((r) => r.topic)),
      groups: new Set(this.groupsWithReplays.all() as string[]),
    };
  }

  /** Wakes this bus's subscriptions of these topics or groups; all of them when `topics` is null. */
  wake(topics: Set<string> | null, groups: Set<string> = new Set()): void {
    for (const sub of this.subscriptions) {
      const replays = groups.has(sub.group);
      if (!topics || replays || sub.topics.some((t) => topics.has(t))) sub.wake(topics, replays);
    }
  }

  async subscribe(options: SubscribeOptions): Promise<Subscription> {
    this.assertOpen();
    const topics = [...new Set(options.topics)];
    if (topics.length === 0) throw new Error('subscribe needs at least one topic');
    const fromBeginning = options.fromBeginning ?? true;
    this.db
      .transaction(() => {
        for (const topic of topics) this.initOffset.run(options.group, topic, fromBeginning ? 1 : 0);
      })
      .immediate();
    const sub = new EmbeddedSubscription(this, options.group, topics, options.handler, options.handleBatch);
    this.subscriptions.add(sub);
    const watch = this.watch(true)!;
    watch.join(this);
    sub.unfollow = watch.follow(topics);
    sub.start();
    return {
      stop: async () => {
        await sub.stop();
        sub.unfollow();
        this.subscriptions.delete(sub);
        if (this.subscriptions.size === 0) this.watch(false)?.leave(this);
      },
    };
  }

  async ping(): Promise<void> {
    this.assertOpen();
    this.db.prepare('SELECT 1').get();
  }

  stalled(): StalledConsumer[] {
    return [...this.subscriptions].flatMap((s) => s.stalls.list());
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await Promise.all([...this.subscriptions].map((s) => s.stop()));
    for (const s of this.subscriptions) s.unfollow();
    this.subscriptions.clear();
    this.watch(false)?.leave(this);
    this.closed = true;
    this.db.close();
    walClosed(this.dbPath);
  }

  /** Deletes messages older than `olderThanMs`, whatever the consumers' positions (like Kafka retention). */
  prune(olderThanMs: number): number {
    this.assertOpen();
    return this.db.prepare('DELETE FROM messages WHERE ts < ?').run(Date.now() - olderThanMs).changes;
  }

  // --- used by EmbeddedSubscription ---

  /**
   * Takes or renews the leases of these topics in one transaction; returns the topics now held. A topic held by
   * another owner is skipped before any write (standbys polling do not contend for the writer) unless its lease
   * expired or its owner's process is gone.
   */
  tryLeases(grp: string, topics: string[], owner: string): Set<string> {
    const now = Date.now();
    const wanted: Array<{ topic: string; gone: string }> = [];
    for (const topic of topics) {
      const lease = this.readLease.get(grp, topic) as { owner: string; expires: number } | undefined;
      const gone = lease && lease.owner !== owner && lease.expires > now ? (holderIsGone(lease.owner) ? lease.owner : null) : '';
      if (gone !== null) wanted.push({ topic, gone });
    }
    const held = new Set<string>();
    if (wanted.length === 0) return held;
    this.db
      .transaction(() => {
        for (const { topic, gone } of wanted)
          if (this.upsertLease.run({ grp, topic, owner, expires: now + this.leaseMs, now, gone }).changes === 1) held.add(topic);
      })
      .immediate();
    return held;
  }

  release(grp: string, topic: string, owner: string): void {
    this.releaseLease.run(grp, topic, owner);
  }

  /** Messages after the group's committed offset on these topics, in seq order. */
  read(grp: string, topics: string[]): { messages: Array<ReceivedMessage & { seq: number }>; full: boolean } {
    const rows: Row[] = [];
    let full = false;
    for (const topic of topics) {
      const part = this.readAfterOffset.all(topic, grp, topic) as Row[];
      if (part.length === BATCH_SIZE) full = true;
      rows.push(...part);
    }
    if (topics.length > 1) rows.sort((a, b) => a.seq - b.seq);
    if (rows.length > BATCH_SIZE) {
      rows.length = BATCH_SIZE;
      full = true;
    }
    const messages = rows.map(received);
    return { messages, full };
  }

  /** Moves the group's offsets to `positions` (topic -> seq handled) in one transaction; answers the topics whose lease `owner` lost. */
  commit(grp: string, positions: Map<string, number>, owner: string): string[] {
    const lost = this.commitTx(grp, positions, owner, Date.now() + this.leaseMs);
    walWritten(this.dbPath);
    return lost;
  }

  private assertOpen(): void {
    if (this.closed) throw new Error('embedded bus is closed');
  }
}

/**
 * The publish signals of one log file in one process, and what turns them into wake-ups. Other processes publish into
 * the same file: instead of polling, consumers sleep until a publisher signals one of the topics consumed here
 * (`topicSignalPath`, inotify on Linux: nothing runs while nothing of ours is published, whatever else is written to
 * the log). A signal, or a publish here, runs one indexed query, the topics of the messages past the highest seq
 * announced (seqs are given in commit order, so nothing committed below it can appear later) and the groups with
 * replays queued, and wakes only the subscriptions of those topics and groups. The buses of one process (each service
 * of the combined process has its own) share it: one query per signal, not one per bus.
 */
class LogWatch {
  private static readonly byPath = new Map<string, LogWatch>();
  /** Buses of this process with subscriptions on this log; the first one reads for all. */
  private readonly buses = new Set<EmbeddedBus>();
  /** The highest seq whose topic has been announced. */
  private seq = 0;
  /** The topics consumed in this process: their subscriptions, and the watch of their signal. */
  private readonly followed = new Map<string, { count: number; unwatch: () => void }>();

  /** `path`: the log file (null for an in-memory log, which only this process writes). */
  constructor(
    private readonly path: string | null,
    private readonly forget: () => void,
  ) {}

  static of(path: string, create: boolean): LogWatch | undefined {
    let w = LogWatch.byPath.get(path);
    if (!w && create) LogWatch.byPath.set(path, (w = new LogWatch(path, () => LogWatch.byPath.delete(path))));
    return w;
  }

  join(bus: EmbeddedBus): void {
    if (this.buses.size === 0) this.seq = bus.highestSeq();
    this.buses.add(bus);
  }

  /** Watches the signals of `topics` for a subscription; returns the function that stops (once). */
  follow(topics: string[]): () => void {
    const path = this.path;
    if (path === null) return () => {};
    for (const topic of topics) {
      const f = this.followed.get(topic);
      if (f) f.count++;
      else this.followed.set(topic, { count: 1, unwatch: watchSignal(topicSignalPath(path, topic), () => this.announce()) });
    }
    let done = false;
    return () => {
      if (done) return;
      done = true;
      for (const topic of topics) {
        const f = this.followed.get(topic);
        if (!f || --f.count > 0) continue;
        f.unwatch();
        this.followed.delete(topic);
      }
    };
  }

  leave(bus: EmbeddedBus): void {
    this.buses.delete(bus);
    if (this.buses.size > 0) return;
    for (const f of this.followed.values()) f.unwatch();
    this.followed.clear();
    this.forget();
  }

  announce(): void {
    const reader = this.buses.values().next().value;
    if (!reader) return;
    let found: ReturnType<EmbeddedBus['newSince']>;
    try {
      found = reader.newSince(this.seq);
    } catch (err) {
      // The log could not be read (locked past busy_timeout): every subscription looks for itself.
      reader.onError(err);
      for (const bus of this.buses) bus.wake(null);
      return;
    }
    this.seq = found.seq;
    if (found.topics.size === 0 && found.groups.size === 0) return;
    for (const bus of this.buses) bus.wake(found.topics, found.groups);
  }
}

class EmbeddedSubscription {
  /** Each subscription is its own lease owner, so a second one of the same group is a standby even in-process. */
  private readonly owner = newHolderId();
  readonly stalls: Stalls;
  /** Stops watching the signals of this subscription's topics (set by the bus once it follows them). */
  unfollow: () => void = () => {};
  /** Topics whose lease we hold -> when we last wrote it. */
  private readonly held = new Map<string, number>();
  private stopped = false;
  private stopping: Promise<void> | null = null;
  private loop: Promise<void> = Promise.resolve();
  private heartbeat: NodeJS.Timeout | undefined;
  /** Something was published in this process since this round began: skip the idle wait. */
  private pending = false;
  /**
   * Topics with news since the round began, as the log's watch reported them (null: not known, read them all). A
   * round reads only these: a group of six topics woken for one reads one, not six.
   */
  private fresh: Set<string> | null = null;
  /** Dead letters may have been queued for replay to this group since the round began. */
  private replaysQueued = true;
  private wakeIdle: (() => void) | null = null;
  private wakeAny: (() => void) | null = null;

  constructor(
    private readonly bus: EmbeddedBus,
    readonly group: string,
    readonly topics: string[],
    private readonly handler: (message: ReceivedMessage) => Promise<void>,
    private readonly handleBatch?: (messages: ReceivedMessage[]) => Promise<void>,
  ) {
    this.stalls = new Stalls(group);
  }

  start(): void {
    holderStarted(this.owner);
    // Keeps leases alive while a handler runs long or a message is in backoff (the loop is not polling then).
    this.heartbeat = setInterval(() => this.refreshLeases(true), Math.max(10, Math.floor(this.bus.leaseMs / 3)));
    this.heartbeat.unref();
    this.loop = this.run();
  }

  /** News on `topics` (null: on any of them, or not known), and whether replays were queued for the group. */
  wake(topics: Set<string> | null = null, replays = true): void {
    if (!topics) this.fresh = null;
    else if (this.fresh) for (const t of this.topics) if (topics.has(t)) this.fresh.add(t);
    if (replays) this.replaysQueued = true;
    this.pending = true;
    this.wakeIdle?.();
  }

  /** The next round reads every topic and the replays (a safety read: after a timed wait, an error, a full batch). */
  private lookEverywhere(): void {
    this.fresh = null;
    this.replaysQueued = true;
  }

  stop(): Promise<void> {
    if (!this.stopping) {
      this.stopped = true;
      clearInterval(this.heartbeat);
      holderStopped(this.owner);
      this.wakeAny?.();
      this.stopping = (async () => {
        await this.loop; // lets the in-flight handler finish
        // Hand the group over at once instead of making a standby wait for expiry.
        for (const topic of this.held.keys()) {
          try {
            this.bus.release(this.group, topic, this.owner);
          } catch (err) {
            this.bus.onError(err);
          }
        }
        this.held.clear();
        this.stalls.clearAll();
      })();
    }
    return this.stopping;
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      let full = false;
      this.pending = false; // reset every round, standby or not, so a publish cannot make the loop spin
      try {
        this.refreshLeases(false);
        const fresh = this.fresh;
        const replays = this.replaysQueued;
        this.fresh = new Set();
        this.replaysQueued = false;
        const topics = this.topics.filter((t) => this.held.has(t) && (!fresh || fresh.has(t)));
        if (topics.length > 0) full = await this.consumeBatch(topics, replays);
        if (full) this.lookEverywhere();
      } catch (err) {
        this.lookEverywhere();
        this.bus.onError(err);
        await this.sleep(LOOP_ERROR_WAIT_MS, false);
        continue;
      }
      if (!full && !this.pending) await this.sleep(this.bus.pollIntervalMs, true);
    }
  }

  /** Returns true when the batch was full, i.e. more may be waiting. */
  private async consumeBatch(topics: string[], replays: boolean): Promise<boolean> {
    // Dead letters an operator replayed come first (out of their original order, by nature).
    for (const { seq, ...message } of replays ? this.bus.readReplays(this.group, topics) : []) {
      if (!(await this.deliver(message, seq))) return false;
      this.bus.replayDone(this.group, message.topic, seq);
    }
    const { messages, full } = this.bus.read(this.group, topics);
    const handled = new Map<string, number>();
    let committedAt = Date.now();
    try {
      if (messages.length > 1 && (await this.deliverBatch(messages))) {
        for (const m of messages) handled.set(m.topic, m.seq);
        return full;
      }
      for (const { seq, ...message } of messages) {
        if (!(await this.deliver(message, seq))) return false; // stopped during retries
        handled.set(message.topic, seq);
        if (Date.now() - committedAt >= COMMIT_EVERY_MS) {
          if (!this.commitHandled(handled)) return false;
          committedAt = Date.now();
        }
      }
      return full;
    } finally {
      // The end of the batch, or an early one (stopping, a lost lease): what was handled is committed either way.
      if (handled.size > 0) this.commitHandled(handled);
    }
  }

  /** Commits and clears `handled`; false when a topic's lease was lost (another consumer resumes from its offset). */
  private commitHandled(handled: Map<string, number>): boolean {
    const lost = this.bus.commit(this.group, handled, this.owner);
    const now = Date.now();
    for (const topic of handled.keys()) {
      if (lost.includes(topic)) this.held.delete(topic);
      else this.held.set(topic, now);
    }
    handled.clear();
    return lost.length === 0;
  }

  /**
   * One call of the batch handler for the whole batch, when the subscription has one: true when it succeeded. When it
   * throws, false, and the batch goes through `deliver` message by message (retries, dead letters).
   */
  private async deliverBatch(messages: Array<ReceivedMessage & { seq: number }>): Promise<boolean> {
    if (!this.handleBatch || this.stopped) return false;
    try {
      await this.handleBatch(messages.map(({ seq: _seq, ...message }) => message));
    } catch (err) {
      this.bus.onError(err);
      return false;
    }
    for (const m of messages) metrics.busHandled.inc({ topic: m.topic, group: this.group, outcome: 'ok' });
    return true;
  }

  /**
   * Calls the handler until it succeeds, or until a poison message has had `maxAttempts` calls (then it is set
   * aside as a dead letter and the group moves on): true; false when the subscription stops first. A failure on an
   * unavailable dependency is retried without limit, the consumer reported stalled meanwhile.
   */
  private async deliver(message: ReceivedMessage, seq: number): Promise<boolean> {
    let delay = RETRY_MIN_MS;
    let poisonCalls = 0;
    try {
      for (;;) {
        if (this.stopped) return false;
        try {
          await this.handler(message);
          metrics.busHandled.inc({ topic: message.topic, group: this.group, outcome: 'ok' });
          return true;
        } catch (err) {
          this.bus.onError(err, message);
          if (isPoison(err)) {
            const last = ++poisonCalls >= this.bus.maxAttempts;
            metrics.busHandled.inc({ topic: message.topic, group: this.group, outcome: last ? 'dead_letter' : 'poison' });
            if (last) {
              this.bus.setAside(this.group, message, seq, poisonCalls, err);
              return true;
            }
          } else {
            metrics.busHandled.inc({ topic: message.topic, group: this.group, outcome: 'retry' });
            this.stalls.failed('', message.topic, message.offset, err);
          }
        }
        await this.sleep(delay, false);
        delay = Math.min(delay * 2, this.bus.retryMaxMs);
      }
    } finally {
      this.stalls.cleared('');
    }
  }

  /**
   * Takes free leases and renews ours. Renewing writes only after a quarter of the lease has passed, to keep
   * the log's writer free; `commit` renews too, so a busy consumer rarely writes a lease here at all.
   */
  private refreshLeases(heldOnly: boolean): void {
    if (this.stopped) return;
    const now = Date.now();
    const due = this.topics.filter((topic) => {
      const renewedAt = this.held.get(topic);
      if (renewedAt === undefined) return !heldOnly;
      return now - renewedAt >= this.bus.leaseMs / 4;
    });
    if (due.length === 0) return;
    try {
      const held = this.bus.tryLeases(this.group, due, this.owner);
      for (const topic of due) {
        if (!held.has(topic)) {
          this.held.delete(topic);
          continue;
        }
        // A topic just taken is read whatever the watch said: the last holder may have left messages and replays.
        if (!this.held.has(topic)) {
          this.fresh?.add(topic);
          this.replaysQueued = true;
        }
        this.held.set(topic, now);
      }
    } catch (err) {
      if (!heldOnly) throw err; // the loop reports and waits; the heartbeat just tries again later
      this.bus.onError(err);
    }
  }

  /** Waits `ms`; `stop()` always cuts it short, a publish in this process only when `idle`. */
  private sleep(ms: number, idle: boolean): Promise<void> {
    if (this.stopped) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wakeIdle = null;
        this.wakeAny = null;
        resolve();
      };
      const timer = setTimeout(() => {
        this.lookEverywhere(); // nothing said there was news: look for what no watch reported
        done();
      }, ms);
      this.wakeAny = done;
      if (idle) this.wakeIdle = done;
    });
  }
}
