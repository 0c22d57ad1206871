import type Redis from 'ioredis';
import { FEED_PAGE_SIZE, untraced, type Logger } from '@svc/kit';

export interface FeedEntry {
  kind: string;
  subjectId: string;
  at: number;
}

/** Reads a service's feed (ListX): entries after a sequence number, oldest first, at most `limit`. */
export type FetchFeed = (afterSeq: number, limit: number) => Promise<{ entries: Array<FeedEntry & { seq: number }>; lastSeq: number }>;
/** Opens the service's notice stream (WatchX). */
export type WatchFeed = () => AsyncIterable<unknown> & { cancel(): void };

/** Between reads while the notice stream is up: a safety net only (a notice lost on the way, a stream gone quiet). */
export const SAFETY_READ_MS = 10_000;

export interface FeedFollowerOptions {
  /** Names the feed in logs. */
  name: string;
  /** Between reads while the notice stream is down, and after a failed read. */
  pollMs: number;
  /** Between reads while the notice stream is up (default SAFETY_READ_MS). */
  safetyReadMs?: number;
  /** Entries asked for per read (default and most: FEED_PAGE_SIZE); a shorter page is the feed's end. */
  pageSize?: number;
  logger: Logger;
  watch?: WatchFeed;
  /** A Redis channel the service also announces on (every gateway hears at once, whichever replica it watches). */
  announcements?: { subscriber: Redis; channel: string };
}

/**
 * Follows a service's change feed (kit feed): reads it (ListX) when the service's notice stream (WatchX) says
 * something may have been appended, when Redis announces it, every `pollMs` while the stream is down or reads fail,
 * and every `safetyReadMs` otherwise. Each read asks for the entries strictly after the last one read (a feed's
 * `seq` is commit order, decision 47) and pages until the feed's end, so every entry reaches the listeners once
 * and in order, however many were appended at once.
 *
 * A notice that arrives while a read is in flight is answered by another read after it: the read in flight may
 * have passed the point the notice is about.
 */
export class FeedFollower {
  private lastSeq = 0;
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  /** The read that follows the one in flight, shared by every caller that arrived meanwhile. */
  private queued: Promise<void> | null = null;
  private readonly listeners: Array<(e: FeedEntry) => void> = [];
  private stream: { cancel(): void } | null = null;
  /** The notice stream is open: reads follow notices, and only the safety read is timed. */
  private watched = false;
  private started = false;
  private stopped = false;
  /** Whether the last read failed: failures are logged when they start, not on every retry. */
  private failing = false;
  /** A read has reached the feed's end. */
  private caughtUp = false;
  /** Callers of untilCurrent, told after every read that succeeds. */
  private readonly waiting = new Set<() => void>();

  constructor(
    private readonly fetch: FetchFeed,
    private readonly options: FeedFollowerOptions,
  ) {}

  /** Starts reading, from the oldest entry the service keeps: no clock of this machine decides where to start. */
  start(): void {
    if (this.started) return;
    this.started = true;
    void this.poll();
    if (this.options.watch) void this.follow(this.options.watch);
    const announced = this.options.announcements;
    if (announced) {
      announced.subscriber
        .subscribe(announced.channel)
        .catch((err: Error) => this.options.logger.warn({ err: err.message, feed: this.options.name }, 'feed subscribe failed'));
      announced.subscriber.on('message', () => void this.poll());
    }
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.stream?.cancel();
    this.options.announcements?.subscriber.disconnect();
    for (const done of [...this.waiting]) done();
  }

  /** Every entry read from the feed, once, in feed order. */
  onEntry(listener: (e: FeedEntry) => void): void {
    this.listeners.push(listener);
  }

  /**
   * Whether what was read can be relied on: a read has reached the feed's end, and no read has failed since. False
   * from start until the first read reaches the end, however many pages that takes.
   */
  get current(): boolean {
    return this.caughtUp && !this.failing;
  }

  /** Resolves with `current` once it is true, or after `ms` (reads go on meanwhile, on their own timers). */
  untilCurrent(ms: number): Promise<boolean> {
    if (this.current) return Promise.resolve(true);
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiting.delete(done);
        resolve(this.current);
      };
      const timer = setTimeout(done, ms);
      this.waiting.add(done);
    });
  }

  /**
   * Reads the feed to its end, in a read that starts after this call (never only one already in flight); resolves
   * when it is done, whether it succeeded (then `current`) or not.
   */
  poll(): Promise<void> {
    if (this.queued) return this.queued;
    if (!this.running) return this.run();
    this.queued = this.running.then(() => {
      this.queued = null;
      return this.run();
    });
    return this.queued;
  }

  private run(): Promise<void> {
    if (this.stopped) return Promise.resolve();
    const running = untraced(() => this.readToEnd())
      .then(
        () => {
          if (this.failing) this.options.logger.info({ feed: this.options.name }, 'feed readable again');
          this.failing = false;
          this.caughtUp = true;
          for (const done of [...this.waiting]) done();
        },
        (err: Error) => {
          // Before the first read the service may simply not be up yet (everything starts at once).
          if (!this.failing && this.caughtUp)
            this.options.logger.warn({ err: err.message, feed: this.options.name }, 'feed unreadable; retrying');
          this.failing = true;
        },
      )
      .finally(() => {
        this.running = null;
        this.schedule();
      });
    this.running = running;
    return running;
  }

  /** The next timed read: soon while the stream is down or reads fail, a safety read otherwise. */
  private schedule(): void {
    if (this.stopped || !this.started) return;
    if (this.timer) clearTimeout(this.timer);
    const ms = this.watched && !this.failing ? (this.options.safetyReadMs ?? SAFETY_READ_MS) : this.options.pollMs;
    this.timer = setTimeout(() => void this.poll(), ms);
    this.timer.unref();
  }

  /** Reads on every notice; while the stream is down (the service restarting, an older one), reads are timed. */
  private async follow(watch: WatchFeed): Promise<void> {
    while (!this.stopped) {
      const stream = watch();
      this.stream = stream;
      try {
        const notices = stream[Symbol.asyncIterator]();
        while (!(await notices.next()).done) {
          this.watched = true;
          void this.poll();
        }
      } catch {
        // the service unreachable or stopping: read on a timer meanwhile and open the stream again
      }
      this.watched = false;
      if (this.stopped) return;
      if (!this.running) this.schedule();
      await new Promise((resolve) => setTimeout(resolve, this.options.pollMs).unref());
    }
  }

  /** Pages through every entry after the last one read; a short page is the feed's end. */
  private async readToEnd(): Promise<void> {
    const pageSize = this.options.pageSize ?? FEED_PAGE_SIZE;
    for (;;) {
      const afterSeq = this.lastSeq;
      const res = await this.fetch(afterSeq, pageSize);
      for (const e of res.entries) {
        // Never twice, never backwards (an answer from an older service version could overlap).
        if (e.seq <= this.lastSeq) continue;
        this.lastSeq = e.seq;
        for (const l of this.listeners) l(e);
      }
      if (res.entries.length < pageSize) return;
      // A full page that moved nothing forward would be read again and again.
      if (this.lastSeq <= afterSeq) throw new Error(`feed ${this.options.name} did not advance past seq ${afterSeq}`);
    }
  }
}
