/**
 * The live event streams on a real SQLite store with its real write hints (inotify), as another replica's commits
 * reach them: a hint is one read of each waiting tenant's newest place, and only the streams behind it read their
 * events. Reads are counted through the real EventLog (its methods are wrapped, not replaced).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, openSqliteStore, type Store } from '@svc/kit';
import { events, type EventDoc } from './collections';
import { EventLog } from './event-log';
import { EventStreams } from './event-stream';

let dir: string;
let store: Store;
let log: EventLog;
let streams: EventStreams;
let stopping: AbortController;

/** Reads of each tenant's events (`after`) and of its newest place (`newestPlace`), counted as they are made. */
const reads = { after: new Map<string, number>(), newest: new Map<string, number>() };
const count = (m: Map<string, number>, tenantId: string) => m.set(tenantId, (m.get(tenantId) ?? 0) + 1);

beforeEach(async () => {
  stopping = new AbortController();
  reads.after.clear();
  reads.newest.clear();
  dir = mkdtempSync(join(tmpdir(), 'webhooks-stream-'));
  store = openSqliteStore({ path: join(dir, 'webhooks.db') });
  await store.ensure(events);
  log = new EventLog(store, { retentionDays: 30, logger: createLogger('event-stream-test', 'silent') });
  const after = log.after.bind(log);
  const newestPlace = log.newestPlace.bind(log);
  log.after = (tenantId, seq, limit) => (count(reads.after, tenantId), after(tenantId, seq, limit));
  log.newestPlace = (tenantId) => (count(reads.newest, tenantId), newestPlace(tenantId));
  // No safety read during a test: what reads is the hints' doing.
  streams = new EventStreams({ log, wake: (hint) => store.watchWrites(hint), safetyReadMs: 600_000 });
});
afterEach(async () => {
  stopping.abort();
  streams.stop();
  await log.stop();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

let n = 0;
function event(tenantId: string): EventDoc {
  const id = `evt_${String(++n).padStart(4, '0')}`;
  const createdAt = new Date().toISOString();
  return { id, tenantId, type: 'project.created', createdAt, body: JSON.stringify({ id, type: 'project.created', createdAt, tenantId }) };
}

/** As another replica commits: recorded in the store, not announced to this process (only the write hint tells). */
async function commitElsewhere(doc: EventDoc) {
  await log.prepare(doc.tenantId);
  await store.transaction((tx) => log.record(tx, doc));
}

/** Opens a stream of the tenant from now; resolves with the ids it receives (filled as they come) once it is open. */
async function openStream(tenantId: string): Promise<string[]> {
  const got: string[] = [];
  await new Promise<void>((opened, failed) => {
    streams
      .serve(
        tenantId,
        '',
        async () => opened(),
        async (e) => void got.push(e.id),
        stopping.signal,
      )
      .catch(failed);
  });
  return got;
}

async function until(what: () => boolean, label: string) {
  for (let i = 0; i < 500 && !what(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  if (!what()) throw new Error(`timed out waiting for ${label}`);
}

/** Longer than the store's hint debounce (200 ms): a hint of what was just written has been acted on. */
const settle = (ms = 400) => new Promise((resolve) => setTimeout(resolve, ms));

test("a commit of one tenant's events makes only that tenant's streams read, and each of them gets every event", async () => {
  // Their head documents exist first (a first write of each is a write hint of its own).
  await log.prepare('ten_a');
  await log.prepare('ten_b');
  const a = await Promise.all([openStream('ten_a'), openStream('ten_a'), openStream('ten_a')]);
  const b = await Promise.all([openStream('ten_b'), openStream('ten_b'), openStream('ten_b')]);
  await settle();
  const before = { a: reads.after.get('ten_a') ?? 0, b: reads.after.get('ten_b') ?? 0, newestB: reads.newest.get('ten_b') ?? 0 };
  // Each stream has made its first read, and no more.
  expect(before.a).toBe(3);
  expect(before.b).toBe(3);

  const first = event('ten_a');
  await commitElsewhere(first);
  await until(() => a.every((got) => got.length === 1), "ten_a's streams to get the event");
  await settle();
  // None of ten_b's streams read: nothing of theirs was written...
  expect(reads.after.get('ten_b')).toBe(before.b);
  expect(b.every((got) => got.length === 0)).toBe(true);
  // ...though the hint was looked at for ten_b, with one read of its newest place, not one per stream.
  const newestReadsB = reads.newest.get('ten_b')! - before.newestB;
  expect(newestReadsB).toBeGreaterThanOrEqual(1);
  expect(newestReadsB).toBeLessThan(3);
  // Each of ten_a's streams read again (at least once: two hints for one commit may each find one behind).
  expect(reads.after.get('ten_a')).toBeGreaterThanOrEqual(before.a + 3);

  // Both tenants write, in bursts: every stream gets every event of its tenant, in commit order, none twice.
  const writtenA = [first.id];
  const writtenB: string[] = [];
  for (let round = 0; round < 5; round++) {
    for (const d of [event('ten_a'), event('ten_b'), event('ten_a')]) {
      await commitElsewhere(d);
      (d.tenantId === 'ten_a' ? writtenA : writtenB).push(d.id);
    }
  }
  await until(() => a.every((got) => got.length === writtenA.length), "ten_a's streams to get every event");
  await until(() => b.every((got) => got.length === writtenB.length), "ten_b's streams to get every event");
  await settle();
  for (const got of a) expect(got).toEqual(writtenA);
  for (const got of b) expect(got).toEqual(writtenB);
});

test("an event this replica announces wakes its tenant's streams at once, and the hint it also makes wakes no other tenant's", async () => {
  await log.prepare('ten_a');
  const a = await openStream('ten_a');
  const b = await openStream('ten_b');
  await settle();
  const beforeB = reads.after.get('ten_b');
  const doc = event('ten_a');
  await log.recordAlone(doc);
  await until(() => a.length === 1, 'the announced event');
  await settle();
  expect(a).toEqual([doc.id]);
  expect(b).toEqual([]);
  expect(reads.after.get('ten_b')).toBe(beforeB);
});
