import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, outboxCollection, openSqliteStore, type Store } from '@svc/kit';
import { decodeDomainEvent } from '@svc/contracts';
import type { eventsV1 } from '@svc/proto';
import { usageMessage } from '../test/fixtures/unit';
import { alertsProblems, billingAlerts, THRESHOLD_CROSSED } from './alerts';
import { accounts, ALL_COLLECTIONS } from './collections';
import { billingEventHandler } from './events';
import { keyUsage, keyUsageId } from './key-usage';
import { addEntry, applyOnce } from './ledger';
import { reserve } from './reservations';

// A token is a credit (1,000 credits per 1,000 tokens), so the sums read plainly.
const PER_1K = 1000;
const T = 'ten_1';
const logger = createLogger('billing-test', 'silent');
let dir: string;
let store: Store;
let n = 0;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'billing-alerts-'));
  store = await openSqliteStore({ path: join(dir, 'billing.db') });
  for (const c of [...ALL_COLLECTIONS, keyUsage, billingAlerts]) await store.ensure(c as Parameters<Store['ensure']>[0]);
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

async function setAlerts(fields: Partial<{ balanceBelow: number; keyBudgetPercents: number[]; dailyCreditsAbove: number }>) {
  await store.collection(billingAlerts).insert({
    id: T,
    tenantId: T,
    balanceBelow: fields.balanceBelow ?? null,
    keyBudgetPercents: fields.keyBudgetPercents ?? [],
    dailyCreditsAbove: fields.dailyCreditsAbove ?? null,
    updatedAt: new Date().toISOString(),
  });
}
const move = (credits: number, kind: 'adjustment' | 'usage' = 'adjustment') =>
  applyOnce(store, (tx) => addEntry(tx, { tenantId: T, sourceKey: `src:${++n}`, kind, credits, description: 'test' }));

/** The threshold events in the outbox, oldest first. */
async function crossings(): Promise<eventsV1.ThresholdCrossedData[]> {
  const page = await store.collection(outboxCollection).find({}, { limit: 500, order: 'asc' });
  return page.items
    .map((r) => decodeDomainEvent(Buffer.from(r.value, 'base64')))
    .filter((e) => e.type === THRESHOLD_CROSSED && e.data?.$case === 'thresholdCrossed')
    .map((e) => (e.data as { value: eventsV1.ThresholdCrossedData }).value);
}

it('concurrent debits crossing the balance threshold put exactly one event in the outbox, with the new balance', async () => {
  await setAlerts({ balanceBelow: 500 });
  await move(1000);
  // 20 concurrent debits of 40: the balance passes 500 once (from 520 to 480), whichever order they commit in.
  await Promise.all(Array.from({ length: 20 }, () => move(-40)));
  expect((await store.collection(accounts).get(T))!.balance).toBe(200);
  expect(await crossings()).toEqual([{ kind: 'balance_below', threshold: 500, value: 480, apiKeyId: '' }]);
});

it('emits nothing further down or on the way back up, and once more after it was re-armed', async () => {
  await setAlerts({ balanceBelow: 500 });
  await move(600);
  await move(-100); // 500: not below yet
  expect(await crossings()).toEqual([]);
  await move(-1); // 499
  await move(-99); // 400
  await move(150); // 550: re-armed
  await move(-200); // 350
  expect((await crossings()).map((c) => c.value)).toEqual([499, 350]);
});

it("counts a UTC day's usage debits, once past the threshold, and starts again the next day", async () => {
  await setAlerts({ dailyCreditsAbove: 100 });
  await move(1000);
  await Promise.all(Array.from({ length: 10 }, () => move(-15, 'usage'))); // 150 debits today: past 100 once, at 105
  await move(500); // credits are not debits
  await move(-200); // an operator's adjustment is not spend
  expect(await crossings()).toEqual([{ kind: 'daily_credits', threshold: 100, value: 105, apiKeyId: '' }]);
  // A new day: the account's day is another, so its total starts from zero and the alert is armed again.
  await store.collection(accounts).update(T, {}, { debitsDay: '2000-01-01' });
  await move(-100, 'usage');
  expect(await crossings()).toHaveLength(1);
  await move(-1, 'usage');
  expect((await crossings()).map((c) => c.value)).toEqual([105, 101]);
});

const usageEvent = (callId: string, tokens: number) => usageMessage(callId, tokens, T);

it("emits each key budget percent the key's settled spend reaches, with the budget its reservation held", async () => {
  await setAlerts({ keyBudgetPercents: [80, 50, 100] });
  await move(10_000);
  const handle = billingEventHandler(store, { creditsPer1kTokens: PER_1K, startingGrant: 0 }, logger);
  const call = async (callId: string, spent: number) => {
    const keyBudget = { keyId: 'key_1', credits: 200, period: 'month' as const };
    await reserve(store, { tenantId: T, callId, tokens: spent, source: 'chat_reply', sourceId: callId, ttlMs: 60_000, keyBudget }, PER_1K);
    await handle(usageEvent(callId, spent));
  };
  await call('c1', 90); // 45 %
  await call('c2', 80); // 85 %: past 50 and 80 at once
  await handle(usageEvent('c2', 80)); // a redelivery changes nothing
  await call('c3', 10); // 90 %
  await call('c4', 20); // 100 %
  expect((await crossings()).filter((c) => c.kind === 'key_budget')).toEqual([
    { kind: 'key_budget', threshold: 50, value: 85, apiKeyId: 'key_1' },
    { kind: 'key_budget', threshold: 80, value: 85, apiKeyId: 'key_1' },
    { kind: 'key_budget', threshold: 100, value: 100, apiKeyId: 'key_1' },
  ]);
  // A new month: the key's period spend starts from zero, so 50 % is armed again.
  await store.collection(keyUsage).update(keyUsageId(T, 'key_1'), {}, { month: '2000-01' });
  await call('c5', 100);
  expect((await crossings()).filter((c) => c.kind === 'key_budget').map((c) => [c.threshold, c.value])).toEqual([
    [50, 85],
    [80, 85],
    [100, 100],
    [50, 50],
  ]);
});

it('validates the thresholds field by field', () => {
  expect(alertsProblems({ balanceBelow: 10, keyBudgetPercents: [50, 80, 100], dailyCreditsAbove: 0 })).toEqual([]);
  expect(
    alertsProblems({ balanceBelow: -1, keyBudgetPercents: [0, 50, 50, 101, 2.5], dailyCreditsAbove: 1.5 }).map((p) => p.field),
  ).toEqual([
    'balanceBelow',
    'dailyCreditsAbove',
    'keyBudgetPercents[0]',
    'keyBudgetPercents[2]',
    'keyBudgetPercents[3]',
    'keyBudgetPercents[4]',
  ]);
  expect(alertsProblems({ keyBudgetPercents: Array.from({ length: 11 }, (_, i) => i + 1) }).map((p) => p.field)).toEqual([
    'keyBudgetPercents',
  ]);
});
