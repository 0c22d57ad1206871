import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, openSqliteStore, type ReceivedMessage, type Store } from '@svc/kit';
import { domainEvent, TOPICS } from '@svc/contracts';
import { ALL_COLLECTIONS, revocations, tenants } from './collections';
import { planChangeHandler } from './plan-changes';

// Identity's copy of the plan on a real SQLite store, fed `tenant.plan_changed` as billing's replicas publish it.
let dir: string;
let store: Store;
let announced: number;
let handle: (m: ReceivedMessage) => Promise<void>;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'identity-plans-'));
  store = await openSqliteStore({ path: join(dir, 'identity.db') });
  for (const c of ALL_COLLECTIONS) await store.ensure(c as Parameters<Store['ensure']>[0]);
  const now = new Date().toISOString();
  await store.collection(tenants).insert({ id: 'ten_a', name: 'A', plan: 'free', ipAllowlist: [], createdAt: now, updatedAt: now });
  announced = 0;
  handle = planChangeHandler(store, createLogger('test', 'silent'), () => announced++);
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const HOUR = 3600_000;
/** Billing's event of a plan change: its version (0: none) and the time on the clock of the replica that made it. */
const changed = (plan: string, version: number, clockSkewMs: number): ReceivedMessage => ({
  ...domainEvent(TOPICS.billing, 'tenant.plan_changed', 'ten_a', {
    $case: 'plan',
    value: { tenantId: 'ten_a', plan, previousPlan: '', changedAt: new Date(Date.now() + clockSkewMs).toISOString(), version },
  }),
  offset: '0',
  timestamp: Date.now(),
});
const plan = async () => (await store.collection(tenants).get('ten_a'))?.plan;

it('ends on the newest change made on two billing replicas whose clocks disagree', async () => {
  await handle(changed('growth', 1, 0)); // replica A
  await handle(changed('enterprise', 2, -HOUR)); // replica B, its clock an hour behind
  expect(await plan()).toBe('enterprise');
  expect(announced).toBe(2);
  // Each change applied is in the revocation feed, for the gateways.
  expect((await store.collection(revocations).find({}, { limit: 10 })).items.filter((r) => r.kind === 'tenant_changed')).toHaveLength(2);
});

it('keeps the newest change when an older one arrives after it (replayed, republished)', async () => {
  const older = changed('growth', 1, 0);
  await handle(changed('enterprise', 2, -HOUR));
  await handle(older);
  expect(await plan()).toBe('enterprise');
  expect(announced).toBe(1);
});

it('orders the events of a billing without versions by their time, and numbered changes after them', async () => {
  await handle(changed('growth', 0, 0));
  await handle(changed('starter', 0, -HOUR)); // older by its time
  expect(await plan()).toBe('growth');
  await handle(changed('enterprise', 1, -2 * HOUR)); // the first numbered change
  expect(await plan()).toBe('enterprise');
  await handle(changed('starter', 0, -3 * HOUR)); // an unnumbered one older than what is held
  expect(await plan()).toBe('enterprise');
});
