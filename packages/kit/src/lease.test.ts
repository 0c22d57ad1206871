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

it('forgets leases it stopped looking at, which only restarts their wait', () => {
  let clock = 0;
  const watch = new LeaseWatch(() => clock);
  watch.stale('old', 1, 1000);
  clock += 10_000;
  expect(watch.stale('other', 1, 1000)).toBe(false);
  expect(watch.size).toBe(1);
  expect(watch.stale('old', 1, 1000)).toBe(false); // seen again: a fresh wait, not an instant take-over
});
