import type Redis from 'ioredis';
import { untraced, type Logger } from '@svc/kit';

export interface RevocationEvent {
  kind: string;
  subjectId: string;
  at: number;
}

type Fetch = (afterSeq: number) => Promise<{ revocations: Array<RevocationEvent & { seq: number }>; lastSeq: number }>;
/** Opens identity's notice stream (WatchRevocations). */
type Watch = () => AsyncIterable<unknown> & { cancel(): void };

/** Channel identity publishes on after recording a revocation. */
export const REVOCATION_CHANNEL = 'svc:revocations';

/** How far back a starting gateway reads: longer than any access token lives (ACCESS_TOKEN_TTL_S max 1 h). */
const LOOKBACK_MS = 2 * 3600_000;
/** Re-read window behind the last seen sequence, for clock skew between identity replicas. */
const OVERLAP_SEQ = 5_000 * 1000;

/**
 * Follows identity's revocation feed and remembers revoked sessions and users so tokens issued before a revocation
 * are refused until they expire. It reads the feed (ListRevocations) when identity's notice stream
 * (WatchRevocations) says something may have been recorded, and when Redis announces one; only while the stream is
 * down does it poll every `pollMs`. So an idle gateway makes no calls, and revocation stays under one second on
 * every gateway instance.
 */
export class RevocationWatcher {
  private lastSeq = (Date.now() - LOOKBACK_MS) * 1000;
  private readonly seen = new Map<string, number>();
  private readonly sessions = new Map<string, number>();
  private readonly users = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private listeners: Array<(e: RevocationEvent) => void> = [];
  private stream: { cancel(): void } | null = null;
  private stopped = false;
  /** Whether the last read of the feed failed: failures are logged when they start, not on every retry. */
  private failing = false;
  private everRead = false;
  ready: Promise<void>;

  constructor(
    private readonly fetch: Fetch,
    private readonly options: { pollMs: number; logger: Logger; subscriber?: Redis | null; watch?: Watch },
  ) {
    this.ready = this.poll();
  }

  start(): void {
    if (this.options.watch) void this.follow(this.options.watch);
    else this.polling(true);
    const sub = this.options.subscriber;
    if (sub) {
      sub
        .subscribe(REVOCATION_CHANNEL)
        .catch((err: Error) => this.options.logger.warn({ err: err.message }, 'revocation subscribe failed'));
      sub.on('message', () => void this.poll());
    }
  }

  stop(): void {
    this.stopped = true;
    this.polling(false);
    this.stream?.cancel();
    this.options.subscriber?.disconnect();
  }

  /** Reads the feed on every notice; while the stream is down (identity restarting, an older identity), polls. */
  private async follow(watch: Watch): Promise<void> {
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
        // identity unreachable or stopping: poll meanwhile and open the stream again
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

  /** Every entry read from the feed, once: revocations, and `tenant_changed` (a change that revokes nothing). */
  onEntry(listener: (e: RevocationEvent) => void): void {
    this.listeners.push(listener);
  }

  /** Whether the feed is being read: read at least once, and the last read succeeded. */
  get current(): boolean {
    return this.everRead && !this.failing;
  }

  /** True when a token of this session or user, issued at `issuedMs` (milliseconds), has been revoked since. */
  isRevoked(sessionId: string, userId: string, issuedMs: number): boolean {
    if (this.sessions.has(sessionId)) return true;
    const userAt = this.users.get(userId);
    return userAt !== undefined && issuedMs <= userAt;
  }

  /** One poll at a time; callers arriving meanwhile share it. */
  poll(): Promise<void> {
    this.running ??= untraced(() => this.pollOnce())
      .then(
        () => {
          if (this.failing) this.options.logger.info('revocation feed readable again');
          this.failing = false;
          this.everRead = true;
        },
        (err: Error) => {
          // Before the first read identity may simply not be up yet (everything starts at once).
          if (!this.failing && this.everRead) this.options.logger.warn({ err: err.message }, 'revocation feed unreadable; retrying');
          this.failing = true;
        },
      )
      .finally(() => (this.running = null));
    return this.running;
  }

  private async pollOnce(): Promise<void> {
    for (;;) {
      const res = await this.fetch(Math.max(0, this.lastSeq - OVERLAP_SEQ));
      let fresh = 0;
      for (const r of res.revocations) {
        const key = `${r.seq}:${r.kind}:${r.subjectId}`;
        if (this.seen.has(key)) continue;
        fresh++;
        this.seen.set(key, r.at);
        if (r.kind === 'session' || r.kind === 'api_key') this.sessions.set(r.subjectId, r.at);
        if (r.kind === 'user') this.users.set(r.subjectId, Math.max(r.at, this.users.get(r.subjectId) ?? 0));
        for (const l of this.listeners) l(r);
      }
      if (res.lastSeq > this.lastSeq) this.lastSeq = res.lastSeq;
      this.prune();
      if (res.revocations.length < 1000 || fresh === 0) return;
    }
  }

  private prune(): void {
    const cutoff = Date.now() - LOOKBACK_MS;
    for (const map of [this.seen, this.sessions, this.users]) for (const [k, at] of map) if (at < cutoff) map.delete(k);
  }
}
