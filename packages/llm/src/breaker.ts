/**
 * A circuit breaker per model deployment (CONTRACT.md 9): after `failures` failed calls within `windowMs` the
 * deployment is skipped, with no attempt at all, for `cooldownMs`; then one trial call is let through (half-open):
 * its success closes the circuit, its failure opens it for another cooldown. It applies as well to a model that has
 * no fallback (a tenant with a single model stops paying for failed attempts while its provider is down).
 *
 * The state lives in the process (see docs/decisions.md): each replica learns a provider's outage from its own calls.
 */

export interface BreakerSettings {
  /** Failures within the window that open the circuit (LLM_BREAKER_FAILURES, default 5). */
  failures: number;
  /** The window the failures are counted in (60 s). */
  windowMs: number;
  /** How long an open circuit skips the deployment before a trial (LLM_BREAKER_COOLDOWN_S, default 30 s). */
  cooldownMs: number;
  /** Clock in ms (monotonic is best); for tests. */
  now?: () => number;
}

export const DEFAULT_BREAKER_FAILURES = 5;
export const DEFAULT_BREAKER_WINDOW_MS = 60_000;
export const DEFAULT_BREAKER_COOLDOWN_MS = 30_000;

export type BreakerState = 'closed' | 'open' | 'half_open';

export type Admission = { allowed: true; trial: boolean } | { allowed: false; retryAfterMs: number };

interface Circuit {
  /** Times of the failures inside the window, oldest first (closed state only). */
  failures: number[];
  /** When the open state ends (0: closed). From then on the circuit is half-open. */
  openUntil: number;
  /** Half-open: a trial call is in flight, every other call is still skipped. */
  trial: boolean;
}

/** Above this many tracked deployments, closed circuits with no recent failure are forgotten. */
const MAX_TRACKED = 10_000;

export class CircuitBreaker {
  private readonly circuits = new Map<string, Circuit>();
  private readonly now: () => number;

  constructor(readonly settings: BreakerSettings) {
    if (!(settings.failures >= 1) || !(settings.windowMs > 0) || !(settings.cooldownMs >= 0))
      throw new Error('breaker settings: failures >= 1, windowMs > 0, cooldownMs >= 0');
    this.now = settings.now ?? (() => performance.now());
  }

  state(key: string): BreakerState {
    const c = this.circuits.get(key);
    if (!c || c.openUntil === 0) return 'closed';
    return this.now() < c.openUntil ? 'open' : 'half_open';
  }

  /** Whether a call would be let through now, without claiming the half-open trial. */
  wouldAdmit(key: string): boolean {
    const c = this.circuits.get(key);
    if (!c || c.openUntil === 0) return true;
    return this.now() >= c.openUntil && !c.trial;
  }

  /**
   * Asks to call the deployment. Closed: allowed. Open: refused until the cooldown ends. Half-open: the first caller
   * gets the trial (`trial: true`) and must report its outcome (success, failure or release); others are refused.
   */
  admit(key: string): Admission {
    const c = this.circuits.get(key);
    if (!c || c.openUntil === 0) return { allowed: true, trial: false };
    const now = this.now();
    if (now < c.openUntil) return { allowed: false, retryAfterMs: Math.ceil(c.openUntil - now) };
    if (c.trial) return { allowed: false, retryAfterMs: 1000 };
    c.trial = true;
    return { allowed: true, trial: true };
  }

  /** The deployment answered: the circuit closes and its failure count starts again. */
  success(key: string): void {
    this.circuits.delete(key);
  }

  /**
   * A call failed in a way that says the deployment is unavailable (429, 5xx, timeout, connection). True when this
   * failure opened the circuit (again, after a failed trial).
   */
  failure(key: string): boolean {
    const now = this.now();
    let c = this.circuits.get(key);
    if (!c) {
      if (this.circuits.size >= MAX_TRACKED) this.prune(now);
      c = { failures: [], openUntil: 0, trial: false };
      this.circuits.set(key, c);
    }
    if (c.openUntil !== 0) {
      // A failed trial (or a call admitted before the circuit opened): open for another cooldown.
      c.openUntil = Math.max(c.openUntil, now + this.settings.cooldownMs);
      c.trial = false;
      return true;
    }
    c.failures.push(now);
    while (c.failures.length && now - c.failures[0] >= this.settings.windowMs) c.failures.shift();
    if (c.failures.length >= this.settings.failures) {
      c.openUntil = now + this.settings.cooldownMs;
      c.failures = [];
      return true;
    }
    return false;
  }

  /** A call ended without saying anything of the deployment (cancelled, refused as bad input): frees the trial. */
  release(key: string): void {
    const c = this.circuits.get(key);
    if (c) c.trial = false;
  }

  private prune(now: number): void {
    for (const [key, c] of this.circuits)
      if (c.openUntil === 0 && (c.failures.length === 0 || now - c.failures[c.failures.length - 1] >= this.settings.windowMs))
        this.circuits.delete(key);
  }
}
