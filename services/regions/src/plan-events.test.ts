import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, openSqliteStore, type BusMessage, type ReceivedMessage, type Store } from '@svc/kit';
import { domainEvent, TOPICS } from '@svc/contracts';
import { appliedEvents, tenantPlans } from './collections';
import { planEventHandler, planOf } from './plan-events';

let dir: string;
let store: Store;
let handle: (m: ReceivedMessage) => Promise<void>;
beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'regions-plans-'));
  store = await openSqliteStore({ path: join(dir, 'regions.db') });
  await store.ensure(tenantPlans);
  await store.ensure(appliedEvents);
  handle = planEventHandler(store, createLogger('test', 'silent'));
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const received = (m: BusMessage): ReceivedMessage => ({ ...m, offset: '0', timestamp: Date.now() });
const HOUR = 3600_000;
/** Billing's event of a plan change: its version (0: none) and the time on the clock of the replica that made it. */
const changed = (tenantId: string, plan: string, version = 1, clockSkewMs = 0) =>
  received(
    domainEvent(TOPICS.billing, 'tenant.plan_changed', tenantId, {
      $case: 'plan',
      value: { tenantId, plan, previousPlan: '', changedAt: new Date(Date.now() + clockSkewMs).toISOString(), version },
    }),
  );
const created = (tenantId: string, plan: string) =>
  received(
    domainEvent(TOPICS.identity, 'tenant.created', tenantId, { $case: 'tenant', value: { id: tenantId, name: 'T', plan, createdAt: '' } }),
  );

it('a tenant not heard of is on free; tenant.created sets its plan', async () => {
  expect(await planOf(store, 'ten_a')).toBe('free');
  await handle(created('ten_a', 'starter'));
  expect(await planOf(store, 'ten_a')).toBe('starter');
});

it('applies each event once: a redelivered older change does not undo a later one', async () => {
  const toGrowth = changed('ten_a', 'growth', 1);
  await handle(toGrowth);
  await handle(changed('ten_a', 'enterprise', 2));
  await handle(toGrowth); // at least once: the bus delivers it again
  expect(await planOf(store, 'ten_a')).toBe('enterprise');
});

it('tenant.created arriving after a plan change (another topic) does not overwrite it', async () => {
  await handle(changed('ten_b', 'growth'));
  await handle(created('ten_b', 'free'));
  expect(await planOf(store, 'ten_b')).toBe('growth');
});

it('ignores other events and unknown plans, and keeps tenants apart', async () => {
  await handle(changed('ten_c', 'platinum'));
  await handle(received(domainEvent(TOPICS.projects, 'project.created', 'ten_c', { $case: 'deleted', value: { id: 'p' } })));
  await handle(changed('ten_d', 'growth'));
  expect(await planOf(store, 'ten_c')).toBe('free');
  expect(await planOf(store, 'ten_d')).toBe('growth');
});

it('ends on the newest change made on two billing replicas whose clocks disagree, and an older one replayed after it changes nothing', async () => {
  const fromA = changed('ten_e', 'growth', 1); // replica A
  const fromB = changed('ten_e', 'enterprise', 2, -HOUR); // replica B, its clock an hour behind
  await handle(fromA);
  await handle(fromB);
  expect(await planOf(store, 'ten_e')).toBe('enterprise');
  // A change seen for the first time after a newer one: a dead letter replayed, or delivered late.
  await handle(changed('ten_f', 'enterprise', 2, -HOUR));
  await handle(changed('ten_f', 'growth', 1));
  expect(await planOf(store, 'ten_f')).toBe('enterprise');
});

it('orders the events of a billing without versions by their time, and numbered changes after them', async () => {
  await handle(changed('ten_g', 'growth', 0));
  await handle(changed('ten_g', 'starter', 0, -HOUR)); // older by its time
  expect(await planOf(store, 'ten_g')).toBe('growth');
  await handle(changed('ten_g', 'enterprise', 1, -2 * HOUR)); // the first numbered change
  expect(await planOf(store, 'ten_g')).toBe('enterprise');
  await handle(changed('ten_g', 'starter', 0, -3 * HOUR)); // an unnumbered one older than what is held
  expect(await planOf(store, 'ten_g')).toBe('enterprise');
  expect(await store.collection(tenantPlans).get('ten_g')).toMatchObject({ version: 1 });
});
