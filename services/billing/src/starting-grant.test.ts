import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openEmbeddedBus, openSqliteStore, OutboxRelay, type EventBus, type ReceivedMessage, type Store } from '@svc/kit';
import { domainEvent, TOPICS } from '@svc/contracts';
import { ALL_COLLECTIONS, ledger } from './collections';
import { billingEventHandler } from './events';
import { callAs } from '../test/fixtures/call';
import { billingHandlers } from './handlers';
import { sandboxProvider } from './providers/sandbox';

// A tenant that calls billing before its tenant.created has been consumed (a Kafka consumer catching up) gets its
// starting grant then, and the event arriving later changes nothing: one grant, whichever comes first.
let dir: string;
let store: Store;
let bus: EventBus;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'billing-grant-'));
  store = await openSqliteStore({ path: join(dir, 'billing.db') });
  for (const c of ALL_COLLECTIONS) await store.ensure(c as Parameters<Store['ensure']>[0]);
  bus = openEmbeddedBus({ path: join(dir, 'bus.db') });
});
afterEach(async () => {
  await bus.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const handlers = () =>
  billingHandlers({
    store,
    relay: new OutboxRelay(store, bus),
    adminToken: undefined,
    provider: sandboxProvider('http://127.0.0.1'),
    creditPriceCents: 1,
    startingGrant: 1000,
  });

function tenantCreated(tenantId: string): ReceivedMessage {
  const m = domainEvent(TOPICS.identity, 'tenant.created', tenantId, {
    $case: 'tenant',
    value: { id: tenantId, name: 'T', plan: 'free', createdAt: new Date().toISOString() },
  });
  return { ...m, offset: '0', timestamp: Date.now() };
}

const consume = (m: ReceivedMessage) =>
  billingEventHandler(store, { creditsPer1kTokens: 1, startingGrant: 1000 }, { debug: () => undefined } as never)(m);

it('grants the starting credits at the first balance read when the event has not arrived, once', async () => {
  const h = handlers();
  const reads = await Promise.all([h.getBalance({}, callAs('ten_early')), h.getSummary({}, callAs('ten_early'))]);
  expect(reads[0].balance).toBe(1000);
  expect(reads[1].balance).toBe(1000);
  await consume(tenantCreated('ten_early'));
  expect((await h.getBalance({}, callAs('ten_early'))).balance).toBe(1000);
  const entries = (await store.collection(ledger).find({ tenantId: 'ten_early' }, { limit: 10 })).items;
  expect(entries.map((e) => [e.kind, e.credits])).toEqual([['grant', 1000]]);
});

it('the event first, then reads: still one grant', async () => {
  await consume(tenantCreated('ten_late'));
  await consume(tenantCreated('ten_late'));
  expect((await handlers().getSummary({}, callAs('ten_late'))).balance).toBe(1000);
  expect((await store.collection(ledger).find({ tenantId: 'ten_late' }, { limit: 10 })).items).toHaveLength(1);
});
