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
  /**
   * A limit of its own (an API key's requestsPerMinute, CONTRACT.md 8): at most `max` admitted per window of
   * `windowS`; a refused request is not counted, so the count is exactly what was let through.
   */
  hitCapped(key: string, max: number, windowS: number): Promise<RateDecision>;
  hitCappedSync?(key: string, max: number, windowS: number): RateDecision;
  /** How many were counted for `key` in the current window of `windowS` (for the key view's usage). */
  peek(key: string, windowS: number): Promise<number>;
  /**
   * A place among at most `max` held at once under `key` (an API key's concurrency), taken by `id` where it is
   * checked (one Redis script, or no await in memory); a place not released lapses after `leaseMs` (its holder died).
   */
  takeSlot(key: string, id: string, max: number, leaseMs: number): Promise<boolean>;
  releaseSlot(key: string, id: string): Promise<void>;
}

/** Places held in this process: key -> holder id -> lease end (monotonic ms). */
class MemorySlots {
  private readonly held = new Map<string, Map<string, number>>();

  take(key: string, id: string, max: number, leaseMs: number): boolean {
    const now = performance.now();
    let holders = this.held.get(key);
    if (!holders) this.held.set(key, (holders = new Map()));
    for (const [holder, until] of holders) if (until <= now) holders.delete(holder);
    if (holders.size >= max && !holders.has(id)) return false;
    holders.set(id, now + leaseMs);
    return true;
  }

  release(key: string, id: string): void {
    const holders = this.held.get(key);
    holders?.delete(id);
    if (holders?.size === 0) this.held.delete(key);
  }
}

/** Fixed windows aligned to the epoch, so every instance agrees on when a window starts and resets. */
function windowOf(now: number, windowS: number) {
  const start = Math.floor(now / (windowS * 1000)) * windowS;
  return { id: start, reset: start + windowS };
}

export class MemoryRateLimiter implements RateLimiter {
  private readonly counts = new Map<string, { id: number; count: number }>();
  private readonly slots = new MemorySlots();

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

  async hitCapped(key: string, max: number, windowS: number): Promise<RateDecision> {
    return this.hitCappedSync(key, max, windowS);
  }

  hitCappedSync(key: string, max: number, windowS: number): RateDecision {
    const w = windowOf(Date.now(), windowS);
    const name = `${key}|${windowS}`;
    let entry = this.counts.get(name);
    if (!entry || entry.id !== w.id) {
      if (this.counts.size > 100_000) this.sweep(w.id);
      entry = { id: w.id, count: 0 };
      this.counts.set(name, entry);
    }
    const allowed = entry.count < max;
    if (allowed) entry.count++;
    return { allowed, limit: max, remaining: max - entry.count, reset: w.reset };
  }

  async peek(key: string, windowS: number): Promise<number> {
    const entry = this.counts.get(windowS === this.windowS ? key : `${key}|${windowS}`);
    const alt = windowS === this.windowS ? this.counts.get(`${key}|${windowS}`) : undefined;
    const id = windowOf(Date.now(), windowS).id;
    return [entry, alt].reduce((n, e) => n + (e && e.id === id ? e.count : 0), 0);
  }

  async takeSlot(key: string, id: string, max: number, leaseMs: number): Promise<boolean> {
    return this.slots.take(key, id, max, leaseMs);
  }

  async releaseSlot(key: string, id: string): Promise<void> {
    this.slots.release(key, id);
  }

  private sweep(current: number) {
    for (const [k, v] of this.counts) if (v.id !== current) this.counts.delete(k);
  }
}

// Admits only below the limit: a refused request leaves the count as it was.
const CAPPED_SCRIPT = `local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n >= tonumber(ARGV[2]) then return {0, n} end
n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return {1, n}`;

// INCR and set the expiry on the first hit, atomically.
const SCRIPT = `local n = redis.call('INCR', KEYS[1]) if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end return n`;

// A sorted set of holders scored by lease end on Redis's own clock (no clocks compared across machines): lapsed
// leases dropped, then a place taken only below the limit.
const SLOT_SCRIPT = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[3]) == false and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`;

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

  async hitCapped(key: string, max: number, windowS: number): Promise<RateDecision> {
    const w = windowOf(Date.now(), windowS);
    try {
      const [allowed, count] = (await this.redis.eval(
        CAPPED_SCRIPT,
        1,
        `svc:rl:${key}:${windowS}:${w.id}`,
        String(windowS * 1000 + 1000),
        String(max),
      )) as [number, number];
      return { allowed: allowed === 1, limit: max, remaining: Math.max(0, max - count), reset: w.reset };
    } catch (err) {
      this.logger.warn({ err: (err as Error).message }, 'rate limit store unreachable; counting locally');
      return this.fallback.hitCappedSync(key, max, windowS);
    }
  }

  async takeSlot(key: string, id: string, max: number, leaseMs: number): Promise<boolean> {
    try {
      return (await this.redis.eval(SLOT_SCRIPT, 1, `svc:slots:${key}`, String(max), String(leaseMs), id)) === 1;
    } catch (err) {
      this.logger.warn({ err: (err as Error).message }, 'rate limit store unreachable; counting places locally');
      return this.fallback.takeSlot(key, id, max, leaseMs);
    }
  }

  async releaseSlot(key: string, id: string): Promise<void> {
    await this.fallback.releaseSlot(key, id);
    try {
      await this.redis.zrem(`svc:slots:${key}`, id);
    } catch {
      // Unreachable: the place lapses with its lease.
    }
  }

  async peek(key: string, windowS: number): Promise<number> {
    const id = windowOf(Date.now(), windowS).id;
    const names = [`svc:rl:${key}:${windowS}:${id}`, ...(windowS === this.windowS ? [`svc:rl:${key}:${id}`] : [])];
    try {
      const values = await this.redis.mget(...names);
      return values.reduce((n, v) => n + Number(v ?? 0), 0);
    } catch {
      // Redis unreachable: requests are being counted locally meanwhile (see hit).
      return this.fallback.peek(key, windowS);
    }
  }
}
