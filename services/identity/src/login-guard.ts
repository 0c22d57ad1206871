import { AppError } from '@svc/kit';

/**
 * What keeps a flood of sign-in attempts from taking sign-in (and everything else) down:
 *
 * - `HashGate`: at most `concurrency` slow password hashes at once, at most `queue` waiting (and a few per client
 *   address, served round-robin between addresses); past that the attempt is refused at once (503 with Retry-After)
 *   instead of joining a queue that would outlast every deadline, and a real user waits for a handful of hashes at
 *   most, whatever one address sends. Hashes
 *   run on libuv's thread pool, which WebCrypto (signing and verifying every JWT) shares: left unbounded, a flood
 *   made logouts, refreshes and the revocation feed wait behind it.
 * - `FailureThrottle`: attempts counted per client address and per (account, address) in fixed windows, checked
 *   before any hashing, so a throttled attempt costs nothing. A success forgives its own attempt. An account is never
 *   locked as such: its owner signing in from another address is not slowed by someone else's guesses, and every
 *   window ends (no permanent lock-out).
 *
 * Both are per process: with N replicas an attacker gets N times the budget, still bounded.
 */
export class HashGate {
  private running = 0;
  private waitingTotal = 0;
  /** Waiters per client address; served round-robin, so one address's burst delays others by one hash each. */
  private readonly queues = new Map<string, Array<() => void>>();

  constructor(
    private readonly concurrency: number,
    private readonly queue: number,
    private readonly perAddressQueue = 4,
    /** A waiter gives up after this long (503): well inside the gateway's deadline, so a flood never meets a 504. */
    private readonly maxWaitMs = 3000,
  ) {}

  async run<T>(address: string, work: () => Promise<T>): Promise<T> {
    if (this.running >= this.concurrency) {
      const mine = this.queues.get(address);
      if (this.waitingTotal >= this.queue || (mine?.length ?? 0) >= this.perAddressQueue) throw busy();
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => {
          // Still waiting (not handed a slot): leave the line and answer now.
          const line = this.queues.get(address);
          const at = line?.indexOf(admit) ?? -1;
          if (at < 0) return;
          line!.splice(at, 1);
          if (line!.length === 0) this.queues.delete(address);
          this.waitingTotal--;
          reject(busy());
        }, this.maxWaitMs);
        const admit = () => {
          clearTimeout(timer);
          resolve();
        };
        if (mine) mine.push(admit);
        else this.queues.set(address, [admit]);
        this.waitingTotal++;
      });
    } else {
      this.running++;
    }
    try {
      return await work();
    } finally {
      this.handOver();
    }
  }

  /** The slot goes to the first waiter of the address that waited longest for a turn (Map order), then rotates. */
  private handOver(): void {
    const first = this.queues.entries().next();
    if (first.done) {
      this.running--;
      return;
    }
    const [address, waiters] = first.value;
    const next = waiters.shift()!;
    this.queues.delete(address);
    if (waiters.length) this.queues.set(address, waiters); // to the back of the rotation
    this.waitingTotal--;
    next();
  }
}

function busy(): AppError {
  return new AppError('SERVICE_UNAVAILABLE', 'Too many sign-in attempts are being checked; try again shortly', {
    reason: 'password_check_busy',
    retryAfterS: 1,
  });
}

interface Window {
  count: number;
  resetAt: number;
}

export interface ThrottleLimits {
  perAddress: number;
  perAccountAddress: number;
  windowMs: number;
  /** Most windows kept; the oldest are dropped first (memory stays bounded under a spray of addresses). */
  maxEntries: number;
}

export class FailureThrottle {
  private readonly windows = new Map<string, Window>();

  constructor(
    private readonly limits: ThrottleLimits,
    private readonly now: () => number = Date.now,
  ) {}

  /** Counts an attempt before it is checked; throws 429 when either window is full. Returns a release for success. */
  begin(account: string, address: string | null): () => void {
    const keys: Array<[string, number]> = [[`a:${address ?? '-'}`, this.limits.perAddress]];
    keys.push([`u:${account}|${address ?? '-'}`, this.limits.perAccountAddress]);
    const now = this.now();
    for (const [key, limit] of keys) {
      const w = this.windowOf(key, now);
      if (w.count >= limit)
        throw new AppError('RATE_LIMIT_EXCEEDED', 'Too many sign-in attempts; try again later', {
          reason: 'too_many_attempts',
          retryAfterS: Math.max(1, Math.ceil((w.resetAt - now) / 1000)),
        });
    }
    for (const [key] of keys) this.windowOf(key, now).count++;
    return () => {
      for (const [key] of keys) {
        const w = this.windows.get(key);
        if (w && w.count > 0) w.count--;
      }
    };
  }

  private windowOf(key: string, now: number): Window {
    let w = this.windows.get(key);
    if (!w || w.resetAt <= now) {
      this.windows.delete(key);
      if (this.windows.size >= this.limits.maxEntries) this.windows.delete(this.windows.keys().next().value!);
      w = { count: 0, resetAt: now + this.limits.windowMs };
      this.windows.set(key, w);
    }
    return w;
  }
}
