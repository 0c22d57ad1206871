import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, domainEvent, openSqliteStore, TOPICS, type BusMessage, type ReceivedMessage, type Store } from '@svc/kit';
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
const changed = (tenantId: string, plan: string) =>
  received(
    domainEvent(TOPICS.billing, 'tenant.plan_changed', tenantId, {
      $case: 'plan',
      value: { tenantId, plan, previousPlan: '', changedAt: '' },
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
  const toGrowth = changed('ten_a', 'growth');
  await handle(toGrowth);
  await handle(changed('ten_a', 'enterprise'));
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
