import { spawn } from 'node:child_process';
import { holderIsGone, holderStarted, holderStopped, LeaseWatch, newHolderId } from './lease';

it('a lease is stale only after its beat stood still for its length on the observer clock', () => {
  let clock = 1_000_000; // any origin: only differences on this clock count
  const watch = new LeaseWatch(() => clock);
  expect(watch.stale('r1', 'g1.b0', 5000)).toBe(false); // first sighting starts the wait
  clock += 4999;
  expect(watch.stale('r1', 'g1.b0', 5000)).toBe(false);
  clock += 1;
  expect(watch.stale('r1', 'g1.b0', 5000)).toBe(true);
  // A new beat restarts the wait.
  expect(watch.stale('r1', 'g1.b1', 5000)).toBe(false);
  clock += 4000;
  expect(watch.stale('r1', 'g1.b1', 5000)).toBe(false);
  // A lease handed back (wait 0) is over at once, even at its first sighting.
  expect(watch.stale('r2', 'released', 0)).toBe(true);
});

it('remembers a bounded number of leases, dropping the one looked at least recently', () => {
  let clock = 0;
  const watch = new LeaseWatch(() => clock, 2);
  watch.stale('a', 1, 1000);
  watch.stale('b', 1, 1000);
  clock += 1000;
  expect(watch.stale('a', 1, 1000)).toBe(true); // looked at rarely, still over once its time passed
  watch.stale('c', 1, 1000); // 'b' is dropped
  expect(watch.size).toBe(2);
  expect(watch.stale('b', 1, 1000)).toBe(false); // seen again: a fresh wait, never an instant take-over
});

describe('holderIsGone', () => {
  it('knows a holder gone only for a process of this host that ended, or a holder of this process that stopped', async () => {
    const mine = newHolderId();
    holderStarted(mine);
    expect(holderIsGone(mine)).toBe(false);
    holderStopped(mine);
    expect(holderIsGone(mine)).toBe(true);
    // A live process of this host (the parent of this one) under its own holder id, another replica.
    const [host] = mine.split('/');
    expect(holderIsGone(`${host}/${process.ppid}/x`)).toBe(false);
    // A process of this host that ended.
    const child = spawn(process.execPath, ['-e', '']);
    await new Promise((r) => child.once('exit', r));
    expect(holderIsGone(`${host}/${child.pid}/x`)).toBe(true);
    // Another host: judged by its beat only.
    expect(holderIsGone(`another-${host}/${child.pid}/x`)).toBe(false);
    // An id of another form (host/random, as agents workers made them) is never taken for a pid.
    expect(holderIsGone(`${host}/${child.pid}`)).toBe(false);
  });
});
