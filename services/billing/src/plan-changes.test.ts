import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openEmbeddedBus, openSqliteStore, OUTBOX_COLLECTIONS, OutboxRelay, type EmbeddedBus, type Store } from '@svc/kit';
import { decodeDomainEvent, TOPICS } from '@svc/contracts';
import type { eventsV1 } from '@svc/proto';
import { ALL_COLLECTIONS } from './collections';
import { billingHandlers } from './handlers';
import { addEntry, applyOnce } from './ledger';
import { sandboxProvider } from './providers/sandbox';

// Plan changes made on two billing replicas whose clocks disagree by an hour, over one real SQLite store and a real
// embedded bus: the events carry versions in the order the changes committed, whatever their times say.
let dir: string;
let store: Store;
let bus: EmbeddedBus;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'billing-plans-'));
  store = await openSqliteStore({ path: join(dir, 'billing.db') });
  for (const c of [...ALL_COLLECTIONS, ...OUTBOX_COLLECTIONS]) await store.ensure(c as Parameters<Store['ensure']>[0]);
  bus = openEmbeddedBus({ path: join(dir, 'bus.db') });
  await applyOnce(store, (tx) =>
    addEntry(tx, { tenantId: 'ten_a', sourceKey: 'grant:ten_a', kind: 'grant', credits: 1000, description: 'g' }),
  );
});
afterEach(async () => {
  await bus.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const replica = (skewMs: number) =>
  billingHandlers({
    store,
    relay: new OutboxRelay(store, bus),
    adminToken: 'op-token',
    provider: sandboxProvider('http://127.0.0.1'),
    creditPriceCents: 1,
    startingGrant: 0,
    now: () => new Date(Date.now() + skewMs),
  });

async function published(count: number): Promise<eventsV1.PlanData[]> {
  await new OutboxRelay(store, bus).flush();
  const got: eventsV1.PlanData[] = [];
  const sub = await bus.subscribe({
    group: 'test',
    topics: [TOPICS.billing],
    handler: async (m) => {
      const event = decodeDomainEvent(m.value);
      if (event.data?.$case === 'plan') got.push(event.data.value);
    },
  });
  for (let i = 0; i < 200 && got.length < count; i++) await new Promise((r) => setTimeout(r, 25));
  await sub.stop();
  return got;
}

it('numbers a tenant’s plan changes in commit order on replicas whose clocks disagree', async () => {
  const a = replica(0);
  const b = replica(-3600_000); // an hour behind
  await a.adminSetPlan({ adminToken: 'op-token', tenantId: 'ten_a', plan: 'growth' });
  await b.adminSetPlan({ adminToken: 'op-token', tenantId: 'ten_a', plan: 'enterprise' });
  await a.adminSetPlan({ adminToken: 'op-token', tenantId: 'ten_a', plan: 'starter' });
  const events = await published(3);
  expect(events.map((e) => [e.plan, e.previousPlan, e.version])).toEqual([
    ['growth', 'free', 1],
    ['enterprise', 'growth', 2],
    ['starter', 'enterprise', 3],
  ]);
  // B's time says its change came first: the time orders nothing.
  expect(events[1].changedAt < events[0].changedAt).toBe(true);
});
