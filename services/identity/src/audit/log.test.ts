import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, openSqliteStore, type Store } from '@svc/kit';
import { AUDIT_COLLECTIONS, auditHeads, auditLog, AuditChainer, auditPending, recordAudit } from './log';

// The chain on a real store: two stores on one SQLite file stand for two replicas.
let dir: string;
let stores: Store[];
const logger = createLogger('audit-test', 'silent');

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'audit-'));
  stores = [];
});
afterEach(async () => {
  for (const s of stores) await s.close();
  rmSync(dir, { recursive: true, force: true });
});

async function replica(): Promise<Store> {
  const store = await openSqliteStore({ path: join(dir, 'identity.db') });
  for (const def of AUDIT_COLLECTIONS) await store.ensure(def);
  stores.push(store);
  return store;
}

const ctx = { clientIp: '10.0.0.9', userAgent: 'ua', requestId: 'req-1' };
const record = (store: Store, tenantId: string, i: number, at?: string) =>
  store.transaction((tx) =>
    recordAudit(
      tx,
      ctx,
      {
        tenantId,
        action: 'secret.created',
        target: { type: 'secret', id: `sec_${i}` },
        changes: { after: { name: `S${i}`, value: 'hidden' } },
        at,
      },
      { type: 'user', id: 'usr_1' },
    ),
  );

it('makes one unbroken chain per tenant while two replicas append the same pending entries at once', async () => {
  const [a, b] = [await replica(), await replica()];
  const [ca, cb] = [new AuditChainer(a, logger, 365), new AuditChainer(b, logger, 365)];
  for (let i = 0; i < 40; i++) await record(i % 2 ? a : b, i % 3 ? 'ten_a' : 'ten_b', i);
  await Promise.all([ca.drain(null), cb.drain(null), ca.drain('ten_a'), cb.drain('ten_b')]);
  expect(await a.collection(auditPending).count({})).toBe(0);
  for (const [tenant, n] of [
    ['ten_a', 26],
    ['ten_b', 14],
  ] as const) {
    expect(await ca.verify(tenant)).toEqual({ valid: true, entries: n, firstBrokenId: null });
    const page = await a.collection(auditLog).find({ tenantId: tenant }, { order: 'asc', limit: 100 });
    expect(page.items.map((e) => e.seq)).toEqual(Array.from({ length: n }, (_, i) => i + 1));
    expect(page.items[0].prevHash).toBeNull();
    expect(page.items.every((e) => e.changes.after && (e.changes.after as { value: string }).value === '[redacted]')).toBe(true);
    expect((await a.collection(auditHeads).get(tenant))?.seq).toBe(n);
  }
});

it('adds an entry recorded twice under one id (a redelivered event) once', async () => {
  const store = await replica();
  const chainer = new AuditChainer(store, logger, 365);
  const once = () =>
    store.transaction((tx) =>
      recordAudit(
        tx,
        ctx,
        { id: 'aud_fixed', tenantId: 'ten_a', action: 'admin.plan_changed', target: { type: 'tenant', id: 'ten_a' } },
        { type: 'admin', id: 'operator' },
      ),
    );
  await once();
  await chainer.drain(null);
  await once(); // chained and gone from pending: recorded again
  await chainer.drain(null);
  expect(await store.collection(auditLog).count({ tenantId: 'ten_a' })).toBe(1);
  expect(await store.collection(auditPending).count({})).toBe(0);
});

it('keeps time order as chain order when a replica clock lags', async () => {
  const store = await replica();
  const chainer = new AuditChainer(store, logger, 365);
  await record(store, 'ten_a', 1, '2026-01-01T00:00:10.000Z');
  await chainer.drain(null);
  await record(store, 'ten_a', 2, '2026-01-01T00:00:05.000Z'); // a replica five seconds behind
  await chainer.drain(null);
  const page = await chainer.list('ten_a', {});
  expect(page.entries.map((e) => [e.target.id, e.at])).toEqual([
    ['sec_2', '2026-01-01T00:00:10.000Z'],
    ['sec_1', '2026-01-01T00:00:10.000Z'],
  ]);
  expect(await chainer.verify('ten_a')).toMatchObject({ valid: true, entries: 2 });
});

it('drops entries past the retention, oldest first, and verifies the rest from the oldest kept prevHash', async () => {
  const store = await replica();
  const chainer = new AuditChainer(store, logger, 30);
  const day = 86_400_000;
  const t0 = Date.parse('2026-01-01T00:00:00Z');
  for (let i = 0; i < 6; i++) await record(store, 'ten_a', i, new Date(t0 + i * 10 * day).toISOString());
  await chainer.drain(null);
  // 55 days after the first entry: the entries of days 0, 10 and 20 are older than 30 days.
  expect(await chainer.prune(t0 + 55 * day)).toBe(3);
  const kept = await store.collection(auditLog).find({ tenantId: 'ten_a' }, { order: 'asc' });
  expect(kept.items.map((e) => e.seq)).toEqual([4, 5, 6]);
  expect(kept.items[0].prevHash).not.toBeNull();
  expect(await chainer.verify('ten_a')).toEqual({ valid: true, entries: 3, firstBrokenId: null });
  // The chain goes on from the head.
  await record(store, 'ten_a', 7);
  expect(await chainer.verify('ten_a')).toEqual({ valid: true, entries: 4, firstBrokenId: null });
});

it('reports the oldest kept entry when entries were cut from the start outside retention', async () => {
  const store = await replica();
  const chainer = new AuditChainer(store, logger, 365);
  for (let i = 0; i < 3; i++) await record(store, 'ten_a', i);
  await chainer.drain(null);
  const [first, second] = (await store.collection(auditLog).find({ tenantId: 'ten_a' }, { order: 'asc' })).items;
  await store.collection(auditLog).delete(first.id);
  expect(await chainer.verify('ten_a')).toEqual({ valid: false, entries: 2, firstBrokenId: second.id });
});

it('reports the last entry when entries were cut from the end (the head remembers)', async () => {
  const store = await replica();
  const chainer = new AuditChainer(store, logger, 365);
  for (let i = 0; i < 3; i++) await record(store, 'ten_a', i);
  await chainer.drain(null);
  const last = (await store.collection(auditLog).find({ tenantId: 'ten_a' }, { limit: 1 })).items[0];
  await store.collection(auditLog).delete(last.id);
  const result = await chainer.verify('ten_a');
  expect(result.valid).toBe(false);
  expect(result.entries).toBe(2);
});
