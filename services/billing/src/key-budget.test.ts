import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, isAppError, openSqliteStore, type Store } from '@svc/kit';
import { domainEvent, TOPICS } from '@svc/contracts';
import { usageMessage } from '../test/fixtures/unit';
import { accounts, ALL_COLLECTIONS, reservations } from './collections';
import { billingEventHandler } from './events';
import { keyUsage, keyUsageId } from './key-usage';
import { addEntry, applyOnce } from './ledger';
import { closeReservation, creditsOf, reserve, type ReserveInput } from './reservations';
import { forgetKeyBudget, lastKeyBudget, type KeyBudget } from './key-budget';

// 1,000 credits per 1,000 tokens: a token is a credit, so the sums read plainly.
const PER_1K = 1000;
const logger = createLogger('billing-test', 'silent');
let dir: string;
let store: Store;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'billing-key-budget-'));
  store = await openSqliteStore({ path: join(dir, 'billing.db') });
  for (const c of [...ALL_COLLECTIONS, keyUsage]) await store.ensure(c as Parameters<Store['ensure']>[0]);
  await applyOnce(store, (tx) =>
    addEntry(tx, { tenantId: 'ten_1', sourceKey: 'grant', kind: 'grant', credits: 10_000, description: 'grant' }),
  );
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const budget = (credits: number, keyId = 'key_1', period: KeyBudget['period'] = 'total'): KeyBudget => ({ keyId, credits, period });
const hold = (callId: string, tokens: number, keyBudget?: KeyBudget): ReserveInput => ({
  tenantId: 'ten_1',
  callId,
  tokens,
  source: 'chat_reply',
  sourceId: callId,
  ttlMs: 60_000,
  keyBudget,
});
const keyDoc = (keyId = 'key_1') => store.collection(keyUsage).get(keyUsageId('ten_1', keyId));

const usageEvent = (callId: string, tokens: number, keyId = 'key_1') => usageMessage(callId, tokens, 'ten_1', { credentialId: keyId });
const settle = (callId: string, tokens: number, keyId = 'key_1') =>
  billingEventHandler(store, { creditsPer1kTokens: PER_1K, startingGrant: 0 }, logger)(usageEvent(callId, tokens, keyId));

it('is exact under concurrency: 40 racing holds of 10 on a budget of 100 give 10, the rest 402 key_budget_exhausted', async () => {
  const results = await Promise.allSettled(Array.from({ length: 40 }, (_, i) => reserve(store, hold(`c${i}`, 10, budget(100)), PER_1K)));
  const refused = results.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason as unknown);
  expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(10);
  expect(refused).toHaveLength(30);
  for (const e of refused) {
    expect(isAppError(e) && e.code).toBe('INSUFFICIENT_CREDITS');
    expect(isAppError(e) && e.details).toMatchObject({ reason: 'key_budget_exhausted', apiKeyId: 'key_1', budget: 100 });
  }
  expect((await keyDoc())?.reserved).toBe(100);
  // The tenant has plenty left: other keys, and the tenant's own sessions, are not held by this key's budget.
  expect(creditsOf(await store.collection(accounts).get('ten_1')).available).toBe(9_900);
  await reserve(store, hold('other', 10, budget(100, 'key_2')), PER_1K);
  await reserve(store, hold('session', 10), PER_1K);
});

it('counts spent credits of the period and open holds: settles and releases give back what they did not use', async () => {
  await reserve(store, hold('c1', 60, budget(100)), PER_1K);
  await expect(reserve(store, hold('c2', 41, budget(100)), PER_1K)).rejects.toMatchObject({
    code: 'INSUFFICIENT_CREDITS',
    details: { reason: 'key_budget_exhausted', spent: 0, reserved: 60, required: 41 },
  });
  // Settled at 25 of its 60: 25 spent, 75 left.
  await settle('c1', 25);
  expect(await keyDoc()).toMatchObject({ reserved: 0, totalCredits: 25 });
  await reserve(store, hold('c3', 75, budget(100)), PER_1K);
  await expect(reserve(store, hold('c4', 1, budget(100)), PER_1K)).rejects.toMatchObject({ details: { reason: 'key_budget_exhausted' } });
  // A released hold gives its credits back; a raised budget counts at once.
  await store.transaction((tx) => closeReservation(tx, 'ten_1', 'c3', 'released'));
  await reserve(store, hold('c5', 75, budget(100)), PER_1K);
  await reserve(store, hold('c6', 50, budget(150)), PER_1K);
  expect(await keyDoc()).toMatchObject({ reserved: 125, totalCredits: 25 });
  // A retried reservation holds nothing more.
  await reserve(store, hold('c6', 50, budget(150)), PER_1K);
  expect((await keyDoc())?.reserved).toBe(125);
  expect(await store.collection(reservations).count({ tenantId: 'ten_1', status: 'open' })).toBe(2);
});

it('a monthly budget counts the current UTC month only', async () => {
  await reserve(store, hold('c1', 80, budget(100, 'key_1', 'month')), PER_1K);
  await settle('c1', 80);
  await expect(reserve(store, hold('c2', 30, budget(100, 'key_1', 'month')), PER_1K)).rejects.toMatchObject({
    details: { reason: 'key_budget_exhausted', spent: 80 },
  });
  // The credits were spent in an earlier month: this month's budget is whole again (a total budget is not).
  await store.collection(keyUsage).update(keyUsageId('ten_1', 'key_1'), {}, { month: '2000-01' });
  await reserve(store, hold('c3', 100, budget(100, 'key_1', 'month')), PER_1K);
  await expect(reserve(store, hold('c4', 30, budget(100)), PER_1K)).rejects.toMatchObject({ details: { reason: 'key_budget_exhausted' } });
});

it('a key id reported under two tenants keeps two counts (never a stuck consumer on one document)', async () => {
  const usage = (tenantId: string) =>
    domainEvent(TOPICS.chat, 'llm.usage', tenantId, {
      $case: 'usage',
      value: {
        source: 'chat_reply',
        sourceId: `msg_${tenantId}`,
        provider: 'openai',
        model: 'gpt-test',
        inputTokens: 10,
        outputTokens: 10,
        keySource: 'tenant',
        credentialId: 'key_shared',
        credentialType: 'api_key',
        estimated: false,
        callId: '',
        projectId: '',
        agentId: '',
      },
    });
  const handle = billingEventHandler(store, { creditsPer1kTokens: 1000, startingGrant: 0 }, { debug: () => undefined } as never);
  for (const tenantId of ['ten_1', 'ten_2']) await handle({ ...usage(tenantId), offset: '0', timestamp: Date.now() });
  expect((await store.collection(keyUsage).get(keyUsageId('ten_1', 'key_shared')))?.totalCredits).toBe(20);
  expect((await store.collection(keyUsage).get(keyUsageId('ten_2', 'key_shared')))?.totalCredits).toBe(20);
});

it('remembers the budget each reservation held, for a revoked key, and forgets it when the key has none', async () => {
  expect(await lastKeyBudget(store, 'ten_1', 'key_1')).toBeUndefined();
  await reserve(store, hold('r1', 10, budget(100)), PER_1K);
  expect(await lastKeyBudget(store, 'ten_1', 'key_1')).toEqual(budget(100));
  await reserve(store, hold('r2', 10, budget(60, 'key_1', 'month')), PER_1K);
  expect(await lastKeyBudget(store, 'ten_1', 'key_1')).toEqual(budget(60, 'key_1', 'month'));
  expect(await lastKeyBudget(store, 'ten_1', 'key_2')).toBeUndefined();
  expect(await lastKeyBudget(store, 'ten_2', 'key_1')).toBeUndefined();
  // The budget removed: a later revocation must not bring it back.
  await forgetKeyBudget(store, 'ten_1', 'key_1');
  expect(await lastKeyBudget(store, 'ten_1', 'key_1')).toBeUndefined();
  expect((await keyDoc())!.reserved).toBe(20);
});
