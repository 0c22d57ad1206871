import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, isPoison, openSqliteStore, type ReceivedMessage, type Store } from '@svc/kit';
import { domainEvent, TOPICS } from '@svc/contracts';
import { accounts, ALL_COLLECTIONS } from './collections';
import { billingEventHandler } from './events';
import { addEntry, applyOnce, rebuildBalance, usageCredits } from './ledger';

let dir: string;
let store: Store;
const logger = createLogger('billing-test', 'silent');
const handle = () => billingEventHandler(store, { creditsPer1kTokens: 1, startingGrant: 1000 }, logger);

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'billing-ledger-'));
  store = await openSqliteStore({ path: join(dir, 'billing.db') });
  for (const c of ALL_COLLECTIONS) await store.ensure(c as Parameters<Store['ensure']>[0]);
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

function received(topic: string, type: string, tenantId: string, data: Parameters<typeof domainEvent>[3]): ReceivedMessage {
  const m = domainEvent(topic, type, tenantId, data);
  return { ...m, offset: '0', timestamp: Date.now() };
}
const usage = (tenantId: string, inputTokens: number, outputTokens: number) =>
  received(TOPICS.chat, 'llm.usage', tenantId, {
    $case: 'usage',
    value: {
      source: 'chat_reply',
      sourceId: 'msg_1',
      provider: 'openai',
      model: 'm',
      inputTokens,
      outputTokens,
      keySource: 'tenant',
      credentialId: 'key_1',
      credentialType: 'api_key',
      estimated: false,
      callId: '',
      projectId: '',
      agentId: '',
    },
  });
const created = (tenantId: string) =>
  received(TOPICS.identity, 'tenant.created', tenantId, {
    $case: 'tenant',
    value: { id: tenantId, name: 'T', plan: 'free', createdAt: '' },
  });
const balance = async (tenantId: string) => (await store.collection(accounts).get(tenantId))?.balance;

it('prices a call per 1,000 tokens, rounded up per call', () => {
  expect(usageCredits(10, 5, 1)).toBe(1);
  expect(usageCredits(1000, 0, 1)).toBe(1);
  expect(usageCredits(1000, 1, 1)).toBe(2);
  expect(usageCredits(0, 0, 1)).toBe(0);
  expect(usageCredits(2500, 0, 3)).toBe(8);
});

it('applies the starting grant and a usage event once, however often the bus delivers them', async () => {
  const h = handle();
  const grant = created('ten_a');
  const spend = usage('ten_a', 1500, 100);
  for (let i = 0; i < 3; i++) await Promise.all([h(grant), h(spend), h(spend)]);
  expect(await balance('ten_a')).toBe(1000 - 2);
  expect(await rebuildBalance(store, 'ten_a')).toBe(998);
});

it('tells a message that is not an event (poison: dead-lettered) from its store being down (retried without limit)', async () => {
  const garbage: ReceivedMessage = { ...usage('tn_x', 1, 1), value: new Uint8Array([0x0a, 0xff, 0x01, 0x61]) };
  const bad = await handle()(garbage).then(
    () => null,
    (err: unknown) => err,
  );
  expect(isPoison(bad)).toBe(true);

  const downDir = mkdtempSync(join(tmpdir(), 'billing-down-'));
  const down = await openSqliteStore({ path: join(downDir, 'billing.db') });
  for (const c of ALL_COLLECTIONS) await down.ensure(c as Parameters<Store['ensure']>[0]);
  await down.close(); // every call now fails, as with a store that is unreachable
  try {
    const handler = billingEventHandler(down, { creditsPer1kTokens: 1, startingGrant: 1000 }, logger);
    const err = await handler(usage('tn_x', 1, 1)).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).not.toBeNull(); // it failed
    expect(isPoison(err)).toBe(false); // a good usage event: never dead-lettered, the money is applied once it is back
  } finally {
    rmSync(downDir, { recursive: true, force: true });
  }
});

it('keeps the balance equal to the sum of its entries under a mixed concurrent load', async () => {
  const h = handle();
  await h(created('ten_b'));
  const work: Array<Promise<unknown>> = [];
  for (let i = 0; i < 60; i++) {
    work.push(h(usage('ten_b', 700 + i, 400)));
    work.push(
      applyOnce(store, (tx) =>
        addEntry(tx, { tenantId: 'ten_b', sourceKey: `purchase:${i}`, kind: 'purchase', credits: 7, description: 'p' }),
      ),
    );
    // The same source twice at once: one applies.
    work.push(
      applyOnce(store, (tx) =>
        addEntry(tx, { tenantId: 'ten_b', sourceKey: `gift:${i % 10}`, kind: 'gift_card', credits: 50, description: 'g' }),
      ),
    );
  }
  await Promise.all(work);
  // 1000 + 60 purchases of 7 + 10 gift cards of 50 - 60 calls of 2 credits (1,100-1,159 tokens each)
  expect(await balance('ten_b')).toBe(1000 + 420 + 500 - 120);
  expect(await rebuildBalance(store, 'ten_b')).toBe(await balance('ten_b'));
});
