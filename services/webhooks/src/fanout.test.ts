/**
 * The fan-out's batch handler against its one-message handler, on a real SQLite store: the same log entries and
 * deliveries, each registration's deliveries queued in event order, nothing twice when a batch comes again.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, openSqliteStore, type CollectionDef, type ReceivedMessage, type Store } from '@svc/kit';
import { domainEvent, TOPICS } from '@svc/contracts';
import { deliveries, events, queue, webhooks, type WebhookDoc } from './collections';
import { EventLog } from './event-log';
import { fanOut } from './fanout';

let dir: string;
let stores: Store[] = [];

afterEach(async () => {
  for (const s of stores) await s.close();
  stores = [];
  rmSync(dir, { recursive: true, force: true });
});

async function open(name: string) {
  const store = openSqliteStore({ path: join(dir, `${name}.db`) });
  stores.push(store);
  for (const def of [webhooks, deliveries, queue, events] as Array<CollectionDef<any>>) await store.ensure(def);
  const hooks: WebhookDoc[] = [
    hook('wh_a1', 'ten_a', ['project.created', 'project.updated']),
    hook('wh_a2', 'ten_a', ['project.updated']),
    { ...hook('wh_a3', 'ten_a', ['project.created']), active: false },
    hook('wh_b1', 'ten_b', ['project.created']),
  ];
  for (const h of hooks) await store.collection(webhooks).insert(h);
  const log = new EventLog(store, { retentionDays: 30, logger: createLogger('fanout-test', 'silent') });
  const queued: string[] = [];
  return { store, queued, consumer: fanOut(store, log, (id) => queued.push(id)) };
}

function hook(id: string, tenantId: string, types: string[]): WebhookDoc {
  const at = '2020-01-01T00:00:00.000Z';
  return {
    id,
    tenantId,
    url: 'https://example.com/h',
    events: types,
    secretSealed: '',
    active: true,
    disabledReason: null,
    failingSince: null,
    createdAt: at,
    updatedAt: at,
  };
}

/** Events of two tenants (and one of a tenant without registrations), as the bus hands them over. */
function messages(): ReceivedMessage[] {
  const made = [
    domainEvent(TOPICS.projects, 'project.created', 'ten_a', { $case: 'project', value: project('prj_1') }),
    domainEvent(TOPICS.projects, 'project.created', 'ten_b', { $case: 'project', value: project('prj_2') }),
    domainEvent(TOPICS.projects, 'project.updated', 'ten_a', { $case: 'project', value: project('prj_1') }),
    domainEvent(TOPICS.projects, 'project.created', 'ten_c', { $case: 'project', value: project('prj_3') }),
    domainEvent(TOPICS.projects, 'project.created', 'ten_a', { $case: 'project', value: project('prj_4') }),
  ];
  return made.map((m, i) => ({ ...m, offset: String(i + 1), timestamp: Date.now() }));
}

function project(id: string) {
  const at = new Date().toISOString();
  return { id, name: id, description: '', language: '', createdAt: at, updatedAt: at };
}

/** What a store holds: log entries, deliveries as (webhook, event) in queue order. */
async function contents(store: Store) {
  const logged = (await store.collection(events).find({}, { limit: 100 })).items.map((e) => e.id).sort();
  const all = (await store.collection(deliveries).find({}, { limit: 100 })).items;
  const queuedOrder = (await store.collection(queue).find({}, { limit: 100, order: 'asc' })).items.map((q) => {
    const d = all.find((x) => x.id === q.id)!;
    return `${d.webhookId}:${d.eventId}`;
  });
  return { logged, queuedOrder };
}

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'webhooks-fanout-'));
});

test('a batch writes what its messages one by one would, each registration in event order, and nothing twice', async () => {
  const batch = messages();
  const one = await open('one');
  for (const m of batch) await one.consumer.handler(m);
  const together = await open('together');
  await together.consumer.handleBatch(batch);

  const expected = await contents(one.store);
  expect(expected.logged).toEqual(batch.map((m) => m.id).sort());
  const [created1, createdB, updated1, , created4] = batch.map((m) => m.id);
  // Active registrations subscribed to the type, each in the order of the events (the inactive wh_a3 gets nothing).
  const perHook = (order: string[]) => {
    const out: Record<string, string[]> = {};
    for (const entry of order) {
      const [webhookId, eventId] = entry.split(':');
      (out[webhookId] ??= []).push(eventId);
    }
    return out;
  };
  expect(perHook(expected.queuedOrder)).toEqual({ wh_a1: [created1, updated1, created4], wh_a2: [updated1], wh_b1: [createdB] });
  const batched = await contents(together.store);
  expect(batched.logged).toEqual(expected.logged);
  expect(perHook(batched.queuedOrder)).toEqual(perHook(expected.queuedOrder));
  expect([...together.queued].sort()).toEqual([...one.queued].sort());

  // The bus may hand the same batch over again (a crash before its offsets moved): nothing new.
  await together.consumer.handleBatch(batch);
  expect(await contents(together.store)).toEqual(batched);
});

test('a message that cannot be decoded fails the batch, so the bus takes it alone', async () => {
  const { consumer, store } = await open('poison');
  const batch = messages();
  batch.splice(2, 0, { ...batch[0], id: 'evt_garbage', value: new Uint8Array([0xff, 0xff, 0xff]), headers: {} });
  await expect(consumer.handleBatch(batch)).rejects.toThrow('not a domain event');
  expect((await contents(store)).logged).toEqual([]);
});
