import type Redis from 'ioredis';
import { untraced, type Logger } from '@svc/kit';

export interface RevocationEvent {
  kind: string;
  subjectId: string;
  at: number;
}

type Fetch = (afterSeq: number) => Promise<{ revocations: Array<RevocationEvent & { seq: number }>; lastSeq: number }>;

/** Channel identity publishes on after recording a revocation. */
export const REVOCATION_CHANNEL = 'svc:revocations';

/** How far back a starting gateway reads: longer than any access token lives (ACCESS_TOKEN_TTL_S max 1 h). */
const LOOKBACK_MS = 2 * 3600_000;
/** Re-read window behind the last seen sequence, for clock skew between identity replicas. */
const OVERLAP_SEQ = 5_000 * 1000;

/**
 * Follows identity's revocation feed: polls it every `pollMs` (and at once when Redis announces one), and
 * remembers revoked sessions and users so tokens issued before a revocation are refused until they expire.
 * Together with the credential cache this keeps revocation under one second on every gateway instance.
 */
export class RevocationWatcher {
  private lastSeq = (Date.now() - LOOKBACK_MS) * 1000;
  private readonly seen = new Map<string, number>();
  private readonly sessions = new Map<string, number>();
  private readonly users = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private listeners: Array<(e: RevocationEvent) => void> = [];
  ready: Promise<void>;

  constructor(
    private readonly fetch: Fetch,
    private readonly options: { pollMs: number; logger: Logger; subscriber?: Redis | null },
  ) {
    this.ready = this.poll();
  }

  start(): void {
    this.timer = setInterval(() => void this.poll(), this.options.pollMs);
    this.timer.unref();
    const sub = this.options.subscriber;
    if (sub) {
      sub
        .subscribe(REVOCATION_CHANNEL)
        .catch((err: Error) => this.options.logger.warn({ err: err.message }, 'revocation subscribe failed'));
      sub.on('message', () => void this.poll());
    }
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.options.subscriber?.disconnect();
  }

  onRevoke(listener: (e: RevocationEvent) => void): void {
    this.listeners.push(listener);
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
      .catch((err: Error) => this.options.logger.warn({ err: err.message }, 'revocation poll failed'))
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
