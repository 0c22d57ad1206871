import type Redis from 'ioredis';
import { untraced, type Logger } from '@svc/kit';

export interface FeedEntry {
  kind: string;
  subjectId: string;
  at: number;
}

/** Reads a service's feed (ListX) after a sequence number. */
export type FetchFeed = (afterSeq: number) => Promise<{ entries: Array<FeedEntry & { seq: number }>; lastSeq: number }>;
/** Opens the service's notice stream (WatchX). */
export type WatchFeed = () => AsyncIterable<unknown> & { cancel(): void };

/**
 * Re-read window behind the last seen sequence. Not needed for correctness (a feed's `seq` follows commit order,
 * kit feed); it costs little and covers a feed written by an older service version whose `seq` was the clock.
 */
const OVERLAP_SEQ = 5_000 * 1000;

export interface FeedFollowerOptions {
  /** Names the feed in logs. */
  name: string;
  pollMs: number;
  /** How long an entry's id is remembered to drop a re-read (the entry's own time). */
  lookbackMs: number;
  logger: Logger;
  watch?: WatchFeed;
  /** A Redis channel the service also announces on (every gateway hears at once, whichever replica it watches). */
  announcements?: { subscriber: Redis; channel: string };
}

/**
 * Follows a service's change feed (kit feed): reads it (ListX) when the service's notice stream (WatchX) says
 * something may have been appended, and when Redis announces it; only while the stream is down does it poll every
 * `pollMs`. So an idle gateway makes no calls, and it hears of a change within moments on every instance. Every
 * entry goes to the listeners once.
 */
export class FeedFollower {
  private lastSeq: number;
  private readonly seen = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private readonly listeners: Array<(e: FeedEntry) => void> = [];
  private stream: { cancel(): void } | null = null;
  private stopped = false;
  /** Whether the last read of the feed failed: failures are logged when they start, not on every retry. */
  private failing = false;
  private everRead = false;
  ready: Promise<void>;

  constructor(
    private readonly fetch: FetchFeed,
    private readonly options: FeedFollowerOptions,
  ) {
    // From the oldest entry the service keeps: no clock of this machine decides where to start.
    this.lastSeq = 0;
    this.ready = this.poll();
  }

  start(): void {
    if (this.options.watch) void this.follow(this.options.watch);
    else this.polling(true);
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
    this.polling(false);
    this.stream?.cancel();
    this.options.announcements?.subscriber.disconnect();
  }

  /** Every entry read from the feed, once. */
  onEntry(listener: (e: FeedEntry) => void): void {
    this.listeners.push(listener);
  }

  /** Whether the feed is being read: read at least once, and the last read succeeded. */
  get current(): boolean {
    return this.everRead && !this.failing;
  }

  /** One read at a time; callers arriving meanwhile share it. */
  poll(): Promise<void> {
    this.running ??= untraced(() => this.pollOnce())
      .then(
        () => {
          if (this.failing) this.options.logger.info({ feed: this.options.name }, 'feed readable again');
          this.failing = false;
          this.everRead = true;
        },
        (err: Error) => {
          // Before the first read the service may simply not be up yet (everything starts at once).
          if (!this.failing && this.everRead)
            this.options.logger.warn({ err: err.message, feed: this.options.name }, 'feed unreadable; retrying');
          this.failing = true;
        },
      )
      .finally(() => (this.running = null));
    return this.running;
  }

  /** Reads the feed on every notice; while the stream is down (the service restarting, an older one), polls. */
  private async follow(watch: WatchFeed): Promise<void> {
    while (!this.stopped) {
      const stream = watch();
      this.stream = stream;
      try {
        const notices = stream[Symbol.asyncIterator]();
        while (!(await notices.next()).done) {
          this.polling(false);
          void this.poll();
        }
      } catch {
        // the service unreachable or stopping: poll meanwhile and open the stream again
      }
      if (this.stopped) return;
      this.polling(true);
      await new Promise((resolve) => setTimeout(resolve, this.options.pollMs).unref());
    }
  }

  private polling(on: boolean): void {
    if (on && !this.timer) {
      this.timer = setInterval(() => void this.poll(), this.options.pollMs);
      this.timer.unref();
    } else if (!on && this.timer) {
      clearInterval(this.timer);
      this.timer = null;
    }
  }

  private async pollOnce(): Promise<void> {
    for (;;) {
      const res = await this.fetch(Math.max(0, this.lastSeq - OVERLAP_SEQ));
      let fresh = 0;
      for (const e of res.entries) {
        const key = `${e.seq}:${e.kind}:${e.subjectId}`;
        if (this.seen.has(key)) continue;
        fresh++;
        this.seen.set(key, e.at);
        for (const l of this.listeners) l(e);
      }
      if (res.lastSeq > this.lastSeq) this.lastSeq = res.lastSeq;
      const cutoff = Date.now() - Math.max(this.options.lookbackMs, OVERLAP_SEQ / 1000 + 60_000);
      for (const [k, at] of this.seen) if (at < cutoff) this.seen.delete(k);
      if (res.entries.length < 1000 || fresh === 0) return;
    }
  }
}
