import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger } from '../logger';
import { openStore } from '../storage';
import { watchWrites } from '../storage/watch-writes';
import type { Store } from '../storage/types';
import { ensureFeedHead, FeedNotifier, feedCollection, feedPageSize, readFeed, recordFeedEntry } from './index';

const feed = feedCollection('changes');
let dir: string;
let store: Store;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'feed-'));
  store = await openStore({ dbName: 'feed', sqlitePath: join(dir, 'feed.db') });
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

it('reads entries after a sequence number, oldest first, only once committed', async () => {
  const first = await store.transaction((tx) => recordFeedEntry(tx, feed, 'changed', 't1/p1'));
  await store
    .transaction(async (tx) => {
      await recordFeedEntry(tx, feed, 'changed', 't1/rolled-back');
      throw new Error('abort');
    })
    .catch(() => undefined);
  const second = await store.transaction((tx) => recordFeedEntry(tx, feed, 'deleted', 't2/p2'));
  expect(second.seq).toBeGreaterThan(first.seq);
  const all = await readFeed(store, feed, 0);
  expect(all.entries.map((e) => [e.kind, e.subjectId])).toEqual([
    ['changed', 't1/p1'],
    ['deleted', 't2/p2'],
  ]);
  expect(all.lastSeq).toBe(second.seq);
  expect((await readFeed(store, feed, first.seq)).entries.map((e) => e.subjectId)).toEqual(['t2/p2']);
  expect(await readFeed(store, feed, second.seq)).toEqual({ entries: [], lastSeq: second.seq });
  // A reader may ask for smaller pages (ListX's limit); 0 or more than a page is a whole page.
  expect(await readFeed(store, feed, 0, 1)).toEqual({ entries: [all.entries[0]], lastSeq: first.seq });
  expect((await readFeed(store, feed, 0, 0)).entries).toHaveLength(2);
  expect([feedPageSize(0), feedPageSize(-3), feedPageSize(5000), feedPageSize(250)]).toEqual([1000, 1000, 1000, 250]);
});

it('notifies a watcher at once, then on every announce, and stops with the notifier', async () => {
  const notifier = new FeedNotifier(store, feed, { pollMs: 1000, logger: createLogger('test', 'silent') });
  const notices: number[] = [];
  const watching = notifier.watch(async (n) => void notices.push(n.at), new AbortController().signal);
  expect(notices).toHaveLength(1);
  await Promise.resolve(); // the notice is written
  notifier.announce();
  await Promise.resolve();
  notifier.announce();
  expect(notices).toHaveLength(3);
  notifier.stop();
  await watching;
});

it("folds the notices of a burst into one while a watcher's stream is full, and sends it when the stream drains", async () => {
  const notifier = new FeedNotifier(store, feed, { pollMs: 1000, logger: createLogger('test', 'silent') });
  let drain!: () => void;
  const sent: number[] = [];
  // A reader that does not keep up: each write waits for the stream to drain.
  const send = (n: { at: number }) => {
    sent.push(n.at);
    return new Promise<void>((resolve) => (drain = resolve));
  };
  const watching = notifier.watch(send, new AbortController().signal);
  for (let i = 0; i < 1000; i++) notifier.announce();
  expect(sent).toHaveLength(1); // the notice at connect, still waiting for the stream
  drain();
  await new Promise((r) => setImmediate(r));
  expect(sent).toHaveLength(2); // one for the whole burst, after it
  drain();
  await new Promise((r) => setImmediate(r));
  expect(sent).toHaveLength(2);
  notifier.stop();
  await watching;
});

it('prunes entries older than retainMs and keeps the rest', async () => {
  const notifier = new FeedNotifier(store, feed, { pollMs: 1000, logger: createLogger('test', 'silent'), retainMs: 60_000 });
  const old = { seq: 1, kind: 'changed', subjectId: 'old', at: Date.now() - 120_000, createdAt: new Date().toISOString() };
  for (let i = 0; i < 3; i++) await store.collection(feed).insert({ ...old, id: `old${i}`, seq: i + 1 });
  await store.transaction((tx) => recordFeedEntry(tx, feed, 'changed', 'new'));
  expect(await notifier.prune()).toBe(3);
  expect((await readFeed(store, feed, 0)).entries.map((e) => e.subjectId)).toEqual(['new']);
});

it("hears of another replica's entry through the store's write notices, without announce", async () => {
  const path = join(dir, 'feed.db');
  const notifier = new FeedNotifier(store, feed, {
    pollMs: 60_000, // so that only the write notice can tell it within the test
    logger: createLogger('test', 'silent'),
    wake: (hint) => watchWrites(path, hint, 20),
  });
  const notices: number[] = [];
  const watching = notifier.watch(async (n) => void notices.push(n.at), new AbortController().signal);
  // The first look records the newest entry; a later write by another connection moves it.
  await new Promise((r) => setTimeout(r, 100));
  await store.transaction((tx) => recordFeedEntry(tx, feed, 'changed', 'before'));
  await new Promise((r) => setTimeout(r, 200));
  const other = await openStore({ dbName: 'feed', sqlitePath: path });
  const before = notices.length;
  await other.transaction((tx) => recordFeedEntry(tx, feed, 'changed', 'from another replica'));
  for (let i = 0; i < 100 && notices.length === before; i++) await new Promise((r) => setTimeout(r, 20));
  expect(notices.length).toBeGreaterThan(before);
  await other.close();
  notifier.stop();
  await watching;
});

it("orders entries by commit, not by the writers' clocks: a writer an hour behind still appends after the newest", async () => {
  await ensureFeedHead(store, feed);
  await ensureFeedHead(store, feed); // idempotent
  const first = await store.transaction((tx) => recordFeedEntry(tx, feed, 'changed', 'on time'));
  // Another replica: its own copy of the module, so nothing of this process's clock bookkeeping helps it.
  let replicaRecord!: typeof recordFeedEntry;
  jest.isolateModules(() => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    replicaRecord = require('./index').recordFeedEntry;
  });
  const realNow = Date.now;
  const behind = jest.spyOn(Date, 'now').mockImplementation(() => realNow() - 3600_000);
  let late;
  try {
    late = await store.transaction((tx) => replicaRecord(tx, feed, 'changed', 'clock an hour behind'));
  } finally {
    behind.mockRestore();
  }
  expect(late.seq).toBeGreaterThan(first.seq);
  // A reader that saw the first entry finds the second.
  expect((await readFeed(store, feed, first.seq)).entries.map((e) => e.subjectId)).toEqual(['clock an hour behind']);
});
