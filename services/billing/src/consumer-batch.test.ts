/** Billing's bus consumer given a batch (SubscribeOptions.handleBatch): one transaction, each event still once. */
import { createLogger, type ReceivedMessage, type Store } from '@svc/kit';
import { domainEvent, modelCallInfo, TOPICS } from '@svc/contracts';
import { storePerTest, usageMessage } from '../test/fixtures/unit';
import { accounts, ledger, reservations } from './collections';
import { billingConsumer } from './events';
import { creditsOf, reserve } from './reservations';
import { requestLog } from './request-log';

// 1,000 credits per 1,000 tokens: a token is a credit.
const PER_1K = 1000;
const logger = createLogger('billing-test', 'silent');
const db = storePerTest('batch', [requestLog as Parameters<Store['ensure']>[0]]);

const OK = { status: 'ok' as const, errorCode: '', latencyMs: 5, ttftMs: 2 };
const received = (m: ReturnType<typeof domainEvent>): ReceivedMessage => ({ ...m, offset: '0', timestamp: Date.now() });
const created = (tenantId: string) => received(domainEvent(TOPICS.identity, 'tenant.created', tenantId, undefined));
const usage = (callId: string, tokens: number, tenantId = 'ten_1', described = true) =>
  usageMessage(
    callId,
    tokens,
    tenantId,
    described ? { call: modelCallInfo({ origin: 'v1', requestId: `req_${callId}`, servedModel: 'm' }, OK) } : {},
  );
const hold = (callId: string, tokens: number, tenantId = 'ten_1') =>
  reserve(db.store, { tenantId, callId, tokens, source: 'chat_reply', sourceId: callId, ttlMs: 60_000 }, PER_1K);
const consumer = () => billingConsumer(db.store, { creditsPer1kTokens: PER_1K, startingGrant: 1000 }, logger);

it('applies a batch of events in one transaction, each once: a grant, settled calls, a release, a repeat', async () => {
  const { handler, handleBatch } = consumer();
  await handler(created('ten_1'));
  await hold('c1', 100);
  await hold('c2', 100);
  await hold('c3', 100);
  const batch = [
    created('ten_2'), // a grant of another tenant
    usage('c1', 40),
    usage('c2', 25),
    usage('c1', 40), // the sweep's report of c1 too: billed once
    usage('c3', 0, 'ten_1', false), // nothing billable: its hold is given back
  ];
  const transaction = jest.spyOn(db.store, 'transaction');
  await handleBatch(batch);
  expect(transaction).toHaveBeenCalledTimes(1);
  expect(creditsOf(await db.store.collection(accounts).get('ten_1'))).toEqual({ balance: 1000 - 65, reserved: 0, available: 935 });
  expect((await db.store.collection(accounts).get('ten_2'))?.balance).toBe(1000);
  const closed = (await db.store.collection(reservations).find({ tenantId: 'ten_1' })).items.map((r) => [r.callId, r.status]);
  expect(closed.sort()).toEqual([
    ['c1', 'settled'],
    ['c2', 'settled'],
    ['c3', 'released'],
  ]);
  expect((await db.store.collection(requestLog).find({ tenantId: 'ten_1' })).items).toHaveLength(2);

  // Delivered again (a crash before the bus recorded the batch): nothing changes.
  await handleBatch(batch);
  expect(creditsOf(await db.store.collection(accounts).get('ten_1'))).toEqual({ balance: 935, reserved: 0, available: 935 });
  expect((await db.store.collection(ledger).find({ tenantId: 'ten_1' })).items).toHaveLength(3); // the grant and two calls
  expect((await db.store.collection(requestLog).find({ tenantId: 'ten_1' })).items).toHaveLength(2);
});

it('throws a batch holding a poison message having written nothing, and the handler applies the rest one by one', async () => {
  const { handler, handleBatch } = consumer();
  await handler(created('ten_1'));
  await hold('c1', 100);
  const poison: ReceivedMessage = { ...usage('c9', 5), value: new Uint8Array([0xff, 0xff, 0xff]) };
  const batch = [usage('c1', 30), poison];
  await expect(handleBatch(batch)).rejects.toThrow();
  expect(creditsOf(await db.store.collection(accounts).get('ten_1'))).toEqual({ balance: 1000, reserved: 100, available: 900 });
  // What the bus then does: each message through the handler (the poison one is dead-lettered there).
  await handler(batch[0]);
  await expect(handler(poison)).rejects.toThrow();
  expect(creditsOf(await db.store.collection(accounts).get('ten_1'))).toEqual({ balance: 970, reserved: 0, available: 970 });
});

it('splits a long batch into transactions of at most 100 events', async () => {
  const { handleBatch } = consumer();
  const batch = Array.from({ length: 250 }, (_, i) => usage(`c${i}`, 1, 'ten_3'));
  const transaction = jest.spyOn(db.store, 'transaction');
  await handleBatch(batch);
  expect(transaction).toHaveBeenCalledTimes(3);
  expect((await db.store.collection(accounts).get('ten_3'))?.balance).toBe(-250);
});
