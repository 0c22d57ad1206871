import type Redis from 'ioredis';
import type { Logger } from '@svc/kit';
import { FeedFollower, type FeedEntry, type FetchFeed, type WatchFeed } from './feed-follower';

export type RevocationEvent = FeedEntry;

/** Channel identity publishes on after recording a revocation. */
export const REVOCATION_CHANNEL = 'svc:revocations';

/** How far back a starting gateway reads: longer than any access token lives (ACCESS_TOKEN_TTL_S max 1 h). */
const LOOKBACK_MS = 2 * 3600_000;

/**
 * Follows identity's revocation feed and remembers revoked sessions and users, so tokens issued before a revocation
 * are refused until they expire. The feed also carries `tenant_changed` (nothing revoked), for the tenant cache.
 */
export class RevocationWatcher extends FeedFollower {
  private readonly sessions = new Map<string, number>();
  private readonly users = new Map<string, number>();
  private prunedAt = 0;

  constructor(
    fetch: FetchFeed,
    options: { pollMs: number; pageSize?: number; logger: Logger; subscriber?: Redis | null; watch?: WatchFeed },
  ) {
    super(fetch, {
      name: 'revocations',
      pollMs: options.pollMs,
      pageSize: options.pageSize,
      logger: options.logger,
      watch: options.watch,
      announcements: options.subscriber ? { subscriber: options.subscriber, channel: REVOCATION_CHANNEL } : undefined,
    });
    // Registered before the first read lands (the constructor only starts it).
    this.onEntry((r) => {
      if (r.kind === 'session' || r.kind === 'api_key') this.sessions.set(r.subjectId, r.at);
      if (r.kind === 'user') this.users.set(r.subjectId, Math.max(r.at, this.users.get(r.subjectId) ?? 0));
      this.prune();
    });
  }

  /**
   * True when a token of this session or user, issued at `issuedMs` (milliseconds), has been revoked since. Only an
   * answer while `current`: callers refuse to decide otherwise (CredentialResolver).
   */
  isRevoked(sessionId: string, userId: string, issuedMs: number): boolean {
    if (this.sessions.has(sessionId)) return true;
    const userAt = this.users.get(userId);
    return userAt !== undefined && issuedMs <= userAt;
  }

  /** Forgets revocations older than any token they could refuse (at most once a minute). */
  private prune(): void {
    if (Date.now() - this.prunedAt < 60_000) return;
    this.prunedAt = Date.now();
    const cutoff = Date.now() - LOOKBACK_MS;
    for (const map of [this.sessions, this.users]) for (const [k, at] of map) if (at < cutoff) map.delete(k);
  }
}
