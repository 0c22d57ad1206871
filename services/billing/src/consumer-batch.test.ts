/** Billing's bus consumer given a batch (SubscribeOptions.handleBatch): one transaction, each event still once. */
import { createLogger, DuplicateKeyError, outboxCollection, type ReceivedMessage, type Store } from '@svc/kit';
import { decodeDomainEvent, domainEvent, modelCallInfo, TOPICS } from '@svc/contracts';
import type { eventsV1 } from '@svc/proto';
import { storePerTest, usageMessage } from '../test/fixtures/unit';
import { billingAlerts, THRESHOLD_CROSSED } from './alerts';
import { accounts, ledger, reservations, usageStats } from './collections';
import { keyUsage, keyUsageId } from './key-usage';
import { usageRollups } from './usage-analytics';
import { billingConsumer } from './events';
import { creditsOf, reserve } from './reservations';
import { requestLog } from './request-log';

// 1,000 credits per 1,000 tokens: a token is a credit.
const PER_1K = 1000;
const logger = createLogger('billing-test', 'silent');
const db = storePerTest('batch', [requestLog, keyUsage, billingAlerts, usageRollups] as Array<Parameters<Store['ensure']>[0]>);

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

describe('counters written once per batch (tally.ts), exactly as event by event', () => {
  const second = storePerTest('batch-one-by-one', [requestLog, keyUsage, billingAlerts, usageRollups] as Array<
    Parameters<Store['ensure']>[0]
  >);
  const budget = { keyId: 'key_1', credits: 200, period: 'total' as const };

  async function prepare(store: Store) {
    await store.collection(billingAlerts).insert({
      id: 'ten_1',
      tenantId: 'ten_1',
      balanceBelow: 900,
      keyBudgetPercents: [80, 50],
      dailyCreditsAbove: 50,
      updatedAt: new Date().toISOString(),
    });
    await billingConsumer(store, { creditsPer1kTokens: PER_1K, startingGrant: 1000 }, logger).handler(created('ten_1'));
    for (const callId of ['c1', 'c2', 'c3', 'c4'])
      await reserve(
        store,
        { tenantId: 'ten_1', callId, tokens: 50, source: 'chat_reply', sourceId: callId, ttlMs: 60_000, keyBudget: budget },
        PER_1K,
      );
  }

  // Balance 1000 -> 960 -> 930 -> 890 (below 900) -> 840; the day 40, 70 (above 50), 110, 160; the key's 200 spent
  // 20 %, 35 %, 55 % (50 %), 80 % (80 %). Two crossings of one kind in a batch, c1 delivered twice.
  const batch = () => [usage('c1', 40), usage('c2', 30), usage('c1', 40), usage('c3', 40), usage('c4', 50)];

  async function state(store: Store) {
    const account = (await store.collection(accounts).get('ten_1'))!;
    const key = (await store.collection(keyUsage).get(keyUsageId('ten_1', 'key_1')))!;
    const rollups = (await store.collection(usageRollups).find({ tenantId: 'ten_1' })).items.map((r) => [r.unit, r.calls, r.credits]);
    const stats = (await store.collection(usageStats).find({ tenantId: 'ten_1' })).items.map((s) => [s.id, s.calls, s.credits]);
    const outbox = await store.collection(outboxCollection).find({}, { limit: 500, order: 'asc' });
    const crossings = outbox.items
      .map((r) => decodeDomainEvent(Buffer.from(r.value, 'base64')))
      .filter((e) => e.type === THRESHOLD_CROSSED && e.data?.$case === 'thresholdCrossed')
      .map((e) => (e.data as { value: eventsV1.ThresholdCrossedData }).value);
    return {
      account: { balance: account.balance, reserved: account.reserved, debitsOfDay: account.debitsOfDay },
      key: { minuteTokens: key.minuteTokens, monthCredits: key.monthCredits, totalCredits: key.totalCredits, reserved: key.reserved },
      rollups: rollups.sort(),
      stats: stats.sort(),
      // The outbox order of a batch's events is the account's, then the keys' (tally.ts): compared as a set.
      crossings: crossings.sort((a, b) => `${a.kind}${a.threshold}`.localeCompare(`${b.kind}${b.threshold}`)),
      logged: (await store.collection(requestLog).find({ tenantId: 'ten_1' })).items.length,
    };
  }

  const expected = {
    account: { balance: 840, reserved: 0, debitsOfDay: 160 },
    key: { minuteTokens: 160, monthCredits: 160, totalCredits: 160, reserved: 0 },
    rollups: [
      ['day', 4, 160],
      ['hour', 4, 160],
    ],
    stats: [
      ['ten_1|credential|key_1', 4, 160],
      ['ten_1|model|m', 4, 160],
    ],
    crossings: [
      { kind: 'balance_below', threshold: 900, value: 890, apiKeyId: '' },
      { kind: 'daily_credits', threshold: 50, value: 70, apiKeyId: '' },
      { kind: 'key_budget', threshold: 50, value: 55, apiKeyId: 'key_1' },
      { kind: 'key_budget', threshold: 80, value: 80, apiKeyId: 'key_1' },
    ],
    logged: 4,
  };

  it('a batch crossing thresholds (two of one tenant) with a redelivered event: the crossings and values of one by one', async () => {
    await prepare(db.store);
    await prepare(second.store);
    await consumer().handleBatch(batch());
    const oneByOne = billingConsumer(second.store, { creditsPer1kTokens: PER_1K, startingGrant: 1000 }, logger);
    for (const m of batch()) await oneByOne.handler(m);
    expect(await state(db.store)).toEqual(expected);
    expect(await state(second.store)).toEqual(expected);

    // Delivered again: nothing moves, nothing crosses again.
    await consumer().handleBatch(batch());
    expect(await state(db.store)).toEqual(expected);
  });

  it("a batch starting on a new UTC day and month counts from zero there, as event by event (the stored day's total is set right)", async () => {
    await prepare(db.store);
    await db.store.collection(accounts).update('ten_1', {}, { debitsDay: '2000-01-01', debitsOfDay: 1000 });
    await db.store
      .collection(keyUsage)
      .update(keyUsageId('ten_1', 'key_1'), {}, { month: '2000-01', monthCredits: 999, minute: 0, minuteTokens: 7 });
    await consumer().handleBatch(batch());
    const today = new Date().toISOString().slice(0, 10);
    expect(await db.store.collection(accounts).get('ten_1')).toMatchObject({ balance: 840, debitsDay: today, debitsOfDay: 160 });
    expect(await db.store.collection(keyUsage).get(keyUsageId('ten_1', 'key_1'))).toMatchObject({
      month: today.slice(0, 7),
      monthCredits: 160,
      minuteTokens: 160,
      totalCredits: 160,
    });
    expect((await state(db.store)).crossings).toEqual(expected.crossings);
  });

  it('a batch retried whole after a duplicate key (another replica won an insert) counts each event once', async () => {
    await prepare(db.store);
    const store = db.store;
    const transaction = store.transaction.bind(store);
    // The first attempt does all its writes, then meets a duplicate key: rolled back, and applyOnce runs it again.
    jest.spyOn(store, 'transaction').mockImplementationOnce((fn) =>
      transaction(async (tx) => {
        await fn(tx);
        throw new DuplicateKeyError('usage_stats', ['id']);
      }),
    );
    await consumer().handleBatch(batch());
    expect(await state(store)).toEqual(expected);
  });
});
