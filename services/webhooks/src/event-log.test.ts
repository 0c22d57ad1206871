/**
 * The event log on a real SQLite store with an injected clock: retention (reads and the sweep), windows, the
 * per-registration "not delivered" view and its bounded scan. No waiting: the clock is moved.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, openSqliteStore, type Store } from '@svc/kit';
import { deliveries, events, type DeliveryDoc, type EventDoc, type WebhookDoc } from './collections';
import { EventLog, SCAN_MAX, tighter } from './event-log';

const DAY = 86_400_000;
const T0 = Date.parse('2025-06-01T00:00:00.000Z');
const iso = (ms: number) => new Date(ms).toISOString();

let dir: string;
let store: Store;
let now = T0;
let log: EventLog;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'webhooks-events-'));
  store = openSqliteStore({ path: join(dir, 'webhooks.db') });
  await store.ensure(events);
  await store.ensure(deliveries);
  now = T0;
  log = new EventLog(store, { retentionDays: 30, logger: createLogger('event-log-test', 'silent'), now: () => now });
});
afterEach(async () => {
  await log.stop();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

function event(n: number, at: number, fields: Partial<EventDoc> = {}): EventDoc {
  const id = `evt_${String(n).padStart(4, '0')}`;
  const doc = { id, tenantId: 'ten_a', type: 'project.created', createdAt: iso(at), body: '', ...fields };
  return { ...doc, body: JSON.stringify({ id, type: doc.type, createdAt: doc.createdAt, tenantId: doc.tenantId, data: {} }) };
}

async function record(...docs: EventDoc[]) {
  await store.transaction(async (tx) => {
    for (const d of docs) await log.record(tx, d);
  });
}

async function ids(page: Promise<{ items: EventDoc[] }>) {
  return (await page).items.map((e) => e.id);
}

const everything = { tenantId: 'ten_a', window: {}, limit: 100, cursor: null };

test('an event past the retention is gone from every read at once, and the sweep deletes it', async () => {
  await record(event(1, T0 - 40 * DAY), event(2, T0 - 29 * DAY), event(3, T0 - DAY), event(4, T0, { tenantId: 'ten_b' }));
  expect(await ids(log.list(everything))).toEqual(['evt_0003', 'evt_0002']);
  expect(await log.get('ten_a', 'evt_0001')).toBeNull();
  expect((await log.get('ten_a', 'evt_0002'))?.id).toBe('evt_0002');

  // Two days later: the 29-day-old event is 31 days old.
  now = T0 + 2 * DAY;
  expect(await ids(log.list(everything))).toEqual(['evt_0003']);
  expect(await log.get('ten_a', 'evt_0002')).toBeNull();
  const seen: string[] = [];
  await log.forEachPage('ten_a', ['project.created'], {}, async (page) => void seen.push(...page.map((e) => e.id)));
  expect(seen).toEqual(['evt_0003']);

  // Only the sweep removes them from the store; it leaves the rest, every tenant's.
  expect(await store.collection(events).count({})).toBe(4);
  expect(await log.sweep()).toBe(2);
  expect((await store.collection(events).find({}, { limit: 10 })).items.map((e) => e.id).sort()).toEqual(['evt_0003', 'evt_0004']);
  expect(await log.sweep()).toBe(0);
});

test('the sweep works through more than one batch, oldest first', async () => {
  const old = Array.from({ length: 1201 }, (_, i) => event(i, T0 - 60 * DAY + i * 1000));
  await record(...old, event(9999, T0));
  expect(await log.sweep()).toBe(1201);
  expect(await store.collection(events).count({})).toBe(1);
});

test('recording an event twice keeps the first (the bus delivers at least once)', async () => {
  const first = event(1, T0);
  await record(first);
  await record({ ...first, body: 'changed' });
  expect((await log.get('ten_a', first.id))?.body).toBe(first.body);
  expect(await store.collection(events).count({})).toBe(1);
});

test('a window bounds createdAt, each side exclusive or inclusive, and never reaches past the retention', async () => {
  await record(...[1, 2, 3, 4, 5].map((n) => event(n, T0 - n * 1000)));
  const window = (lower?: string, lowerOp: 'gt' | 'gte' = 'gt', upper?: string) => ({
    ...everything,
    window: { ...(lower ? { lower: { op: lowerOp, iso: lower } } : {}), ...(upper ? { upper: { op: 'lt' as const, iso: upper } } : {}) },
  });
  expect(await ids(log.list(window(iso(T0 - 4000), 'gt', iso(T0 - 1000))))).toEqual(['evt_0002', 'evt_0003']);
  expect(await ids(log.list(window(iso(T0 - 4000), 'gte', iso(T0 - 1000))))).toEqual(['evt_0002', 'evt_0003', 'evt_0004']);
  expect(await ids(log.list(window(iso(T0 - 100 * DAY))))).toHaveLength(5);
  now = T0 + 30 * DAY - 3000; // the cut-off is now T0 - 3000: exclusive, so evt_0003 is gone
  expect(await ids(log.list(window(iso(T0 - 100 * DAY))))).toEqual(['evt_0001', 'evt_0002']);
});

test('forEachPage visits the types asked for, oldest first, in pages, and an empty window once', async () => {
  const types = ['project.created', 'project.deleted', 'user.created'];
  await record(...Array.from({ length: 450 }, (_, i) => event(i, T0 - 100_000 + i, { type: types[i % 3] })));
  const pages: string[][] = [];
  await log.forEachPage('ten_a', ['project.deleted', 'user.created'], {}, async (page) => void pages.push(page.map((e) => e.id)));
  expect(pages.length).toBeGreaterThan(1);
  const want = Array.from({ length: 450 }, (_, i) => i)
    .filter((i) => i % 3 !== 0)
    .map((i) => `evt_${String(i).padStart(4, '0')}`);
  expect(pages.flat()).toEqual(want);
  const single: string[] = [];
  await log.forEachPage('ten_a', ['user.created'], {}, async (page) => void single.push(...page.map((e) => e.id)));
  expect(single).toEqual(want.filter((id) => Number(id.slice(4)) % 3 === 2));
  let visits = 0;
  await log.forEachPage('ten_a', ['user.created'], { lower: { op: 'gt', iso: iso(T0) } }, async (page) => {
    visits++;
    expect(page).toEqual([]);
  });
  expect(visits).toBe(1);
});

test('tighter keeps the later lower bound and the earlier upper one; on a tie the exclusive one', () => {
  const a = { lower: { op: 'gte' as const, iso: '2025-01-02' }, upper: { op: 'lt' as const, iso: '2025-01-09' } };
  const b = { lower: { op: 'gt' as const, iso: '2025-01-02' }, upper: { op: 'lte' as const, iso: '2025-01-05' } };
  expect(tighter(a, b)).toEqual({ lower: { op: 'gt', iso: '2025-01-02' }, upper: { op: 'lte', iso: '2025-01-05' } });
  expect(tighter(a, {})).toEqual(a);
  expect(tighter({ upper: { op: 'lte', iso: 'x' } }, { upper: { op: 'lt', iso: 'x' } })).toEqual({ upper: { op: 'lt', iso: 'x' } });
});

describe('undelivered', () => {
  const hook: WebhookDoc = {
    id: 'whk_1',
    tenantId: 'ten_a',
    url: 'http://127.0.0.1:9/',
    events: ['project.created', 'project.deleted'],
    secretSealed: '',
    active: false,
    disabledReason: null,
    failingSince: null,
    createdAt: iso(T0 - 10_000),
    updatedAt: iso(T0 - 10_000),
  };
  async function delivery(eventId: string, status: DeliveryDoc['status']) {
    await store.collection(deliveries).insert({
      id: `dlv_${eventId}`,
      tenantId: 'ten_a',
      webhookId: hook.id,
      eventId,
      eventType: 'project.created',
      body: '',
      status,
      attempts: [],
      scheduled: 0,
      manual: false,
      firstAttemptAt: null,
      nextAttemptAt: null,
      createdAt: iso(T0),
      updatedAt: iso(T0),
    });
  }

  test("shows the registration's types created after it that did not reach it: failed, pending or never sent", async () => {
    await record(
      event(1, T0 - 20_000), // before the registration
      event(2, T0 - 9000), // succeeded
      event(3, T0 - 8000), // failed
      event(4, T0 - 7000, { type: 'project.updated' }), // not its type
      event(5, T0 - 6000, { type: 'project.deleted' }), // never sent (it was disabled)
      event(6, T0 - 5000), // pending
      event(7, T0 - 4000, { tenantId: 'ten_b' }), // another tenant's
    );
    await delivery('evt_0002', 'succeeded');
    await delivery('evt_0003', 'failed');
    await delivery('evt_0006', 'pending');
    expect(await ids(log.undelivered(hook, everything))).toEqual(['evt_0006', 'evt_0005', 'evt_0003']);
    expect(await ids(log.undelivered(hook, { ...everything, type: 'project.deleted' }))).toEqual(['evt_0005']);
    expect(await ids(log.undelivered(hook, { ...everything, type: 'project.updated' }))).toEqual([]);
    // Pages of one: each page ends at its item, and the last position yields nothing more.
    const pages: string[][] = [];
    let cursor: string | null = null;
    do {
      const page: { items: EventDoc[]; nextCursor: string | null } = await log.undelivered(hook, { ...everything, limit: 1, cursor });
      pages.push(page.items.map((e) => e.id));
      cursor = page.nextCursor;
    } while (cursor && pages.length < 10);
    expect(pages.flat()).toEqual(['evt_0006', 'evt_0005', 'evt_0003']);
  });

  test('one page reads at most SCAN_MAX events, and its cursor goes on from there', async () => {
    const docs = Array.from({ length: SCAN_MAX + 50 }, (_, i) => event(i, T0 - 5000 + i));
    await record(...docs);
    for (const d of docs.slice(10)) await delivery(d.id, 'succeeded');
    // The newest SCAN_MAX events were all delivered: the first page is empty, with a cursor to go on.
    const first = await log.undelivered(hook, everything);
    expect(first.items).toEqual([]);
    expect(first.nextCursor).not.toBeNull();
    const second = await log.undelivered(hook, { ...everything, cursor: first.nextCursor });
    expect(second.items.map((e) => e.id)).toEqual(
      docs
        .slice(0, 10)
        .map((d) => d.id)
        .reverse(),
    );
    expect(second.nextCursor).toBeNull();
  });
});

test('the live order is commit order, per tenant, whatever createdAt says; a resume reads after a place; the sweep drops places', async () => {
  // Committed in this order, with createdAt out of order (a producer's clock behind, the bus bringing one late).
  await record(event(1, T0 - 1000), event(2, T0 - 5000));
  await record(event(3, T0 - 9000, { tenantId: 'ten_b' }), event(4, T0 - 40 * DAY));
  await record(event(5, T0 - 2000));
  await record(event(1, T0 - 1000)); // the bus delivering it again: no second place
  const all = await log.after('ten_a', 0, 100);
  expect(all.events.map((e) => e.id)).toEqual(['evt_0001', 'evt_0002', 'evt_0005']); // 4 is past the retention
  const place = (await log.placeOf('ten_a', 'evt_0002'))!;
  expect((await log.after('ten_a', place, 100)).events.map((e) => e.id)).toEqual(['evt_0005']);
  expect(await log.newestPlace('ten_a')).toBe(all.lastSeq);
  expect(await log.placeOf('ten_a', 'evt_0003')).toBeNull(); // another tenant's
  expect((await log.after('ten_b', 0, 100)).events.map((e) => e.id)).toEqual(['evt_0003']);
  await log.sweep();
  expect((await log.after('ten_a', 0, 100)).events.map((e) => e.id)).toEqual(['evt_0001', 'evt_0002', 'evt_0005']);
  expect(await log.placeOf('ten_a', 'evt_0004')).toBeNull();
});
