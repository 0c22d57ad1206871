import { ReadCache } from './read-cache';

/** A load whose answer the test releases. */
function deferred<V>() {
  let resolve!: (v: V) => void;
  const promise = new Promise<V>((ok) => (resolve = ok));
  return { promise, resolve, load: () => promise };
}

function cache(options: Partial<{ ttlMs: number; maxEntries: number; current: () => boolean }> = {}) {
  return new ReadCache<string>({ name: 'test', ttlMs: 60_000, maxEntries: 100, current: () => true, ...options });
}

it('answers from the cache after the first load, and loads again after a drop', async () => {
  const c = cache();
  let loads = 0;
  const load = async () => `v${++loads}`;
  expect(await c.get('t1', load)).toBe('v1');
  expect(await c.get('t1', load)).toBe('v1');
  c.drop('t1');
  expect(await c.get('t1', load)).toBe('v2');
  expect(loads).toBe(2);
});

it('does not keep an answer that a change overtook', async () => {
  const c = cache();
  const slow = deferred<string>();
  const reading = c.get('t1', slow.load);
  c.drop('t1'); // the record changed while identity's answer was on its way
  slow.resolve('old');
  expect(await reading).toBe('old');
  expect(await c.get('t1', async () => 'new')).toBe('new');
  expect(await c.get('t1', async () => 'unused')).toBe('new');
});

it('never lets an earlier-started load replace what a later one kept', async () => {
  const c = cache();
  const early = deferred<string>();
  const late = deferred<string>();
  const a = c.get('t1', early.load);
  const b = c.get('t1', late.load);
  late.resolve('new');
  expect(await b).toBe('new');
  early.resolve('old');
  expect(await a).toBe('old');
  expect(await c.get('t1', async () => 'unused')).toBe('new');
});

it('answers nothing from the cache, and keeps nothing, while the feed is not being read', async () => {
  let current = true;
  const c = cache({ current: () => current });
  await c.get('t1', async () => 'v1');
  current = false;
  expect(await c.get('t1', async () => 'v2')).toBe('v2');
  expect(c.size).toBe(0);
  current = true;
  expect(await c.get('t1', async () => 'v3')).toBe('v3');
  // The feed failed while this load was on its way: not kept.
  const slow = deferred<string>();
  const reading = c.get('t2', slow.load);
  current = false;
  slow.resolve('v4');
  await reading;
  current = true;
  expect(await c.get('t2', async () => 'v5')).toBe('v5');
});

it('expires entries after the TTL and holds at most maxEntries', async () => {
  const c = cache({ ttlMs: 0, maxEntries: 2 });
  await c.get('a', async () => 'a1');
  expect(await c.get('a', async () => 'a2')).toBe('a2');
  const d = cache({ maxEntries: 2 });
  for (const k of ['a', 'b', 'c']) await d.get(k, async () => k);
  expect(d.size).toBe(2);
  expect(await d.get('a', async () => 'a again')).toBe('a again');
  expect(await d.get('c', async () => 'unused')).toBe('c');
});

it('keeps tenants apart: a drop touches only its key', async () => {
  const c = cache();
  await c.get('t1', async () => 'one');
  await c.get('t2', async () => 'two');
  c.drop('t1');
  expect(await c.get('t2', async () => 'unused')).toBe('two');
  expect(await c.get('t1', async () => 'one again')).toBe('one again');
});
