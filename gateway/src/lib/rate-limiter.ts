import type Redis from 'ioredis';
import type { Logger } from '@svc/kit';

export interface RateDecision {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Unix epoch seconds when the window resets. */
  reset: number;
}

export interface RateLimiter {
  hit(key: string): Promise<RateDecision>;
  /** Present when a decision needs no I/O (the in-memory limiter): lets the hot path skip a promise. */
  hitSync?(key: string): RateDecision;
}

/** Fixed windows aligned to the epoch, so every instance agrees on when a window starts and resets. */
function windowOf(now: number, windowS: number) {
  const start = Math.floor(now / (windowS * 1000)) * windowS;
  return { id: start, reset: start + windowS };
}

export class MemoryRateLimiter implements RateLimiter {
  private readonly counts = new Map<string, { id: number; count: number }>();

  constructor(
    private readonly max: number,
    private readonly windowS: number,
  ) {}

  async hit(key: string): Promise<RateDecision> {
    return this.hitSync(key);
  }

  hitSync(key: string): RateDecision {
    const w = windowOf(Date.now(), this.windowS);
    let entry = this.counts.get(key);
    if (!entry || entry.id !== w.id) {
      if (this.counts.size > 100_000) this.sweep(w.id);
      entry = { id: w.id, count: 0 };
      this.counts.set(key, entry);
    }
    entry.count++;
    return { allowed: entry.count <= this.max, limit: this.max, remaining: Math.max(0, this.max - entry.count), reset: w.reset };
  }

  private sweep(current: number) {
    for (const [k, v] of this.counts) if (v.id !== current) this.counts.delete(k);
  }
}

// INCR and set the expiry on the first hit, atomically.
const SCRIPT = `local n = redis.call('INCR', KEYS[1]) if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end return n`;

/** One count shared by every gateway instance. Falls back to a local count if Redis is unreachable. */
export class RedisRateLimiter implements RateLimiter {
  private readonly fallback: MemoryRateLimiter;

  constructor(
    private readonly redis: Redis,
    private readonly max: number,
    private readonly windowS: number,
    private readonly logger: Logger,
  ) {
    this.fallback = new MemoryRateLimiter(max, windowS);
  }

  async hit(key: string): Promise<RateDecision> {
    const w = windowOf(Date.now(), this.windowS);
    try {
      const count = (await this.redis.eval(SCRIPT, 1, `svc:rl:${key}:${w.id}`, String(this.windowS * 1000 + 1000))) as number;
      return { allowed: count <= this.max, limit: this.max, remaining: Math.max(0, this.max - count), reset: w.reset };
    } catch (err) {
      this.logger.warn({ err: (err as Error).message }, 'rate limit store unreachable; counting locally');
      return this.fallback.hitSync(key);
    }
  }
}
