import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, feedCollection, openStore, readFeed, recordFeedEntry, type Store } from '@svc/kit';
import { FeedFollower, type FetchFeed, type WatchFeed } from './feed-follower';

// The follower against kit feed over a real SQLite store: the fetch function is what the service's ListX handler
// runs, and the notice stream stands in for its WatchX stream (the test says when a notice goes out).

const feed = feedCollection('changes');
const logger = createLogger('test', 'silent');
let dir: string;
let store: Store;
const followers: FeedFollower[] = [];

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'feed-follower-'));
  store = await openStore({ dbName: 'feed', sqlitePath: join(dir, 'feed.db') });
});
afterEach(async () => {
  for (const f of followers.splice(0)) f.stop();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const readAfter: FetchFeed = (afterSeq, limit) => readFeed(store, feed, afterSeq, limit);

/** Appends entries named `<prefix><i>`, `perTransaction` to a commit, as fast as the store goes. */
async function append(prefix: string, count: number, perTransaction = 1): Promise<string[]> {
  const names = Array.from({ length: count }, (_, i) => `${prefix}${i}`);
  for (let i = 0; i < count; i += perTransaction)
    await store.transaction(async (tx) => {
      for (const name of names.slice(i, i + perTransaction)) await recordFeedEntry(tx, feed, 'changed', name);
    });
  return names;
}

/** A notice stream the test feeds, as WatchX would be. */
function noticeStream() {
  let pending = 0;
  let wake: (() => void) | null = null;
  let ended = false;
  const stream = {
    async *[Symbol.asyncIterator]() {
      while (!ended) {
        if (pending > 0) {
          pending--;
          yield { at: Date.now() };
        } else await new Promise<void>((resolve) => (wake = resolve));
      }
    },
    cancel() {
      ended = true;
      wake?.();
    },
  };
  return {
    watch: (() => stream) as WatchFeed,
    notify() {
      pending++;
      const w = wake;
      wake = null;
      w?.();
    },
  };
}

function follow(fetch: FetchFeed, options: { pollMs?: number; safetyReadMs?: number; pageSize?: number; watch?: WatchFeed } = {}) {
  const follower = new FeedFollower(fetch, { name: 'test', pollMs: options.pollMs ?? 60_000, logger, ...options });
  followers.push(follower);
  const seen: string[] = [];
  follower.onEntry((e) => seen.push(e.subjectId));
  follower.start();
  return { follower, seen };
}

async function until(check: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((ok) => (resolve = ok));
  return { promise, resolve };
}

it('reads a burst of 2,000 entries to the end and the entry after it; a follower started after the burst reaches the end', async () => {
  const notices = noticeStream();
  const live = follow(readAfter, { watch: notices.watch });
  notices.notify(); // the notice a stream gives when it opens
  await until(() => live.follower.current, 5000, 'first read');

  // Within a second or two: far more than a page (1,000) inside the old 5 s re-read window.
  const burst: string[] = [];
  for (let batch = 0; batch < 20; batch++) {
    burst.push(...(await append(`b${batch}-`, 100, 100)));
    notices.notify();
  }
  await until(() => live.seen.length >= 2000, 10_000, `the burst read (${live.seen.length} of 2000)`);
  expect(live.seen).toEqual(burst);

  const [after] = await append('after', 1);
  notices.notify();
  await until(() => live.seen.length === 2001, 5000, 'the entry after the burst');
  expect(live.seen[2000]).toBe(after);

  // A gateway (re)started now reads from the oldest entry kept, through every page, to the end.
  const late = follow(readAfter, { pollMs: 50 });
  await until(() => late.seen.length >= 2001 && late.follower.current, 10_000, `a late follower (${late.seen.length} of 2001)`);
  expect(late.seen).toEqual([...burst, after]);
});

it('asks for pages of its own size (FEED_PAGE_SIZE) and reads them to the end; a short page ends a read', async () => {
  const appended = await append('paged', 45, 15);
  const asked: Array<[number, number]> = [];
  const counting: FetchFeed = (afterSeq, limit) => {
    asked.push([afterSeq, limit]);
    return readAfter(afterSeq, limit);
  };
  const { follower, seen } = follow(counting, { pollMs: 50, pageSize: 10 });
  await until(() => follower.current, 5000, 'the end');
  expect(seen).toEqual(appended);
  // Five pages of 10 (the fifth, of 5, is the end), each after the last entry of the one before.
  expect(asked.map(([, limit]) => limit)).toEqual([10, 10, 10, 10, 10]);
  const afters = asked.map(([afterSeq]) => afterSeq);
  expect(afters).toEqual([...afters].sort((a, b) => a - b));
  expect(new Set(afters).size).toBe(5);
});

it('reads again after a notice that came during a read: an entry committed just after the read is delivered', async () => {
  let hold: { read: ReturnType<typeof deferred>; release: ReturnType<typeof deferred> } | null = null;
  // ListX answered from the store at once, its answer delayed on the way back (a slow network, a loaded gateway).
  const delayed: FetchFeed = async (afterSeq) => {
    const res = await readFeed(store, feed, afterSeq);
    const h = hold;
    if (h) {
      hold = null;
      h.read.resolve();
      await h.release.promise;
    }
    return res;
  };
  const notices = noticeStream();
  // No timed read could explain a delivery within the test.
  const { follower, seen } = follow(delayed, { watch: notices.watch, pollMs: 60_000, safetyReadMs: 60_000 });
  notices.notify();
  await until(() => follower.current, 5000, 'first read');
  await follower.poll(); // nothing in flight from here on

  const h = (hold = { read: deferred(), release: deferred() });
  await append('first', 1);
  notices.notify();
  await h.read.promise; // the service has read the feed; its answer is on its way
  await append('second', 1);
  notices.notify(); // the notice for the second entry arrives while the read is in flight
  h.release.resolve();

  await until(() => seen.includes('second0'), 2000, 'the entry committed after the read in flight');
  expect(seen).toEqual(['first0', 'second0']);
});

it('reads now and then while the stream is up and silent (a lost notice costs seconds, not a token lifetime)', async () => {
  const notices = noticeStream();
  const { follower, seen } = follow(readAfter, { watch: notices.watch, pollMs: 60_000, safetyReadMs: 100 });
  notices.notify();
  await until(() => follower.current, 5000, 'first read');
  await append('unannounced', 1); // no notice reaches the follower
  await until(() => seen.includes('unannounced0'), 3000, 'the unannounced entry');
});

it('is current only once a read has reached the end, and not after a failed read until one succeeds', async () => {
  await append('old', 2500, 500);
  let pages = 0;
  let failing = false;
  let gate: ReturnType<typeof deferred> | null = deferred();
  const fetch: FetchFeed = async (afterSeq) => {
    if (failing) throw new Error('identity unreachable');
    if (++pages === 2 && gate) await gate.promise; // the second page is slow
    return readFeed(store, feed, afterSeq);
  };
  const notices = noticeStream();
  const { follower, seen } = follow(fetch, { watch: notices.watch, pollMs: 50, safetyReadMs: 60_000 });
  notices.notify();
  await until(() => seen.length === 1000, 5000, 'the first page');
  expect(follower.current).toBe(false); // read part of the way: revocations past it are unknown
  gate.resolve();
  gate = null;
  await until(() => follower.current, 5000, 'the end');
  expect(seen).toHaveLength(2500);

  failing = true;
  notices.notify();
  await until(() => !follower.current, 2000, 'a failed read noticed');
  // The stream is up, yet a failed read is retried at `pollMs`, not at the safety read's pace.
  failing = false;
  await until(() => follower.current, 2000, 'current again');
});
