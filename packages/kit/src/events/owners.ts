/**
 * Lease owners of this machine's processes: `host/pid/random`, unique per lease holder (a relay, a bus consumer).
 * A lease whose owner ran on this host in a process that no longer exists (or in this process, but was stopped)
 * can be taken at once, as after a crash and restart, instead of waiting for it to expire. Owners on other hosts are
 * judged by their lease alone.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';

const HOST = hostname();
/** Owners alive in this process. */
const LIVE = new Set<string>();

/** A new owner id of this process; it counts as alive from `markLive` until `retireOwner`. */
export function newOwner(): string {
  return `${HOST}/${process.pid}/${randomBytes(9).toString('base64url')}`;
}

/** The holder runs (started). */
export function markLive(owner: string): void {
  LIVE.add(owner);
}

/** The holder stopped (its leases are handed back or left to expire). */
export function retireOwner(owner: string): void {
  LIVE.delete(owner);
}

/** True when `owner` is known to be gone without waiting for its lease: see the module comment. */
export function ownerIsGone(owner: string): boolean {
  const [host, pidText] = owner.split('/');
  if (host !== HOST) return false;
  const pid = Number(pidText);
  if (!Number.isInteger(pid) || pid <= 0) return false;
  if (pid === process.pid) return !LIVE.has(owner);
  try {
    process.kill(pid, 0);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH';
  }
}
