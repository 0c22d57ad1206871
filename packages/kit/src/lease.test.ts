import { LeaseWatch } from './lease';

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
