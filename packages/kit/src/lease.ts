/**
 * Lease expiry judged without comparing clocks across machines, the rule the outbox relay follows
 * (docs/delivery-guarantees.md): a holder shows it is alive by changing its lease's beat (a counter it bumps while
 * it works); an observer treats the lease as abandoned only after it has itself seen the same beat for the lease's
 * length on its own monotonic clock. A holder's clock running ahead or behind changes nothing: no time written by
 * one machine is read by another. The take-over is then a conditional write on that beat which also bumps the
 * lease's generation, the fence every later commit of the old holder is checked against (and refused by).
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';

interface Sighting {
  beat: string;
  /** When this observer first saw `beat` (its own clock). */
  since: number;
}

/** Leases remembered at most; the least recently looked at is dropped first. */
const MAX_REMEMBERED = 10_000;

/** The monotonic clock of this process (ms); immune to wall-clock steps. */
export const monotonicNow = (): number => performance.now();

/** One observer's memory of other holders' leases: (lease id, beat, first seen). */
export class LeaseWatch {
  /** In order of last look (a look moves an entry to the end). */
  private readonly seen = new Map<string, Sighting>();

  constructor(
    private readonly now: () => number = monotonicNow,
    private readonly capacity = MAX_REMEMBERED,
  ) {}

  /**
   * True when lease `id` has shown the same `beat` for `waitMs` as this observer saw it; a new beat restarts the
   * wait. A wait of 0 or less (a lease handed back) is over at once. However rarely the observer looks, the wait
   * ends once that much of its own time has passed since it first saw the beat.
   */
  stale(id: string, beat: string | number, waitMs: number): boolean {
    const now = this.now();
    const key = String(beat);
    const s = this.seen.get(id);
    this.seen.delete(id);
    if (!s || s.beat !== key) {
      this.remember(id, { beat: key, since: now });
      return waitMs <= 0;
    }
    this.seen.set(id, s);
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
   * Memory stays bounded: past `capacity`, the lease looked at least recently (finished work, most likely) is
   * dropped. Dropping one only restarts its wait, which delays a take-over and never hastens it.
   */
  private remember(id: string, s: Sighting): void {
    if (this.seen.size >= this.capacity) this.seen.delete(this.seen.keys().next().value!);
    this.seen.set(id, s);
  }
}

const HOST = hostname();
/** Holders alive in this process. */
const LIVE = new Set<string>();

/**
 * A holder id that tells where it runs (host/pid/random), for the one fast path that needs no waiting: a holder on
 * this very host whose process is gone (a crash and restart), or an instance of this process that stopped.
 * Register it with `holderStarted` and `holderStopped`.
 */
export function newHolderId(): string {
  return `${HOST}/${process.pid}/${randomBytes(6).toString('base64url')}`;
}

export function holderStarted(id: string): void {
  LIVE.add(id);
}

export function holderStopped(id: string): void {
  LIVE.delete(id);
}

/** True only when `id` is known to be gone without waiting; a holder on another host is judged by its beat only. */
export function holderIsGone(id: string): boolean {
  const parts = id.split('/');
  // Only ids of newHolderId's form: an id of another form (an older version's) is judged by its beat.
  if (parts.length !== 3) return false;
  const [host, pidText] = parts;
  if (host !== HOST) return false;
  const pid = Number(pidText);
  if (!Number.isInteger(pid) || pid <= 0) return false;
  if (pid === process.pid) return !LIVE.has(id);
  try {
    process.kill(pid, 0);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH';
  }
}
