/**
 * Lease expiry judged without comparing clocks across machines, the rule the outbox relay follows
 * (docs/delivery-guarantees.md): a holder shows it is alive by changing its lease's beat (a counter it bumps while
 * it works); an observer treats the lease as abandoned only after it has itself seen the same beat for the lease's
 * length on its own monotonic clock. A holder's clock running ahead or behind changes nothing: no time written by
 * one machine is read by another. The take-over is then a conditional write on that beat which also bumps the
 * lease's generation, the fence every later commit of the old holder is checked against (and refused by).
 */

interface Sighting {
  beat: string;
  /** When this observer first saw `beat` (its own clock). */
  since: number;
  /** When it last looked, and the wait asked then: entries not looked at for a while are dropped. */
  lookedAt: number;
  waitMs: number;
}

/** The monotonic clock of this process (ms); immune to wall-clock steps. */
export const monotonicNow = (): number => performance.now();

/** One observer's memory of other holders' leases: (lease id, beat, first seen). */
export class LeaseWatch {
  private readonly seen = new Map<string, Sighting>();
  private prunedAt: number;

  constructor(private readonly now: () => number = monotonicNow) {
    this.prunedAt = now();
  }

  /**
   * True when lease `id` has shown the same `beat` for `waitMs` as this observer saw it; a new beat restarts the
   * wait. A wait of 0 or less (a lease handed back) is over at once.
   */
  stale(id: string, beat: string | number, waitMs: number): boolean {
    const now = this.now();
    this.prune(now);
    const key = String(beat);
    const s = this.seen.get(id);
    if (!s || s.beat !== key) {
      this.seen.set(id, { beat: key, since: now, lookedAt: now, waitMs });
      return waitMs <= 0;
    }
    s.lookedAt = now;
    s.waitMs = waitMs;
    return now - s.since >= waitMs;
  }

  /** Forgets a lease (taken, finished): a later sighting starts a fresh wait. */
  forget(id: string): void {
    this.seen.delete(id);
  }

  get size(): number {
    return this.seen.size;
  }

  /**
   * Drops leases not looked at for three of their lengths (finished work): memory stays bounded. Dropping one only
   * restarts its wait, which delays a take-over and never hastens it.
   */
  private prune(now: number): void {
    if (now - this.prunedAt < 1000) return;
    this.prunedAt = now;
    for (const [id, s] of this.seen) if (now - s.lookedAt > Math.max(3 * s.waitMs, 1000)) this.seen.delete(id);
  }
}
