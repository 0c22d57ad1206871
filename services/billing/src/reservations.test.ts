import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, GroupCommit, isAppError, openSqliteStore, type Store } from '@svc/kit';
import { domainMetrics } from '@svc/contracts';
import { usageMessage } from '../test/fixtures/unit';
import { accounts, ALL_COLLECTIONS, ledger, reservations } from './collections';
import { billingEventHandler } from './events';
import { addEntry, applyOnce } from './ledger';
import { closeReservation, creditsOf, reserve, ReservationSweeper, type ReserveInput } from './reservations';

// 1,000 credits per 1,000 tokens: a token is a credit, so the sums read plainly.
const PER_1K = 1000;
const logger = createLogger('billing-test', 'silent');
let dir: string;
let store: Store;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'billing-reservations-'));
  store = await openSqliteStore({ path: join(dir, 'billing.db') });
  for (const c of ALL_COLLECTIONS) await store.ensure(c as Parameters<Store['ensure']>[0]);
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

async function grant(tenantId: string, credits: number): Promise<void> {
  await applyOnce(store, (tx) => addEntry(tx, { tenantId, sourceKey: `grant:${tenantId}`, kind: 'grant', credits, description: 'grant' }));
}
const hold = (callId: string, tokens: number, tenantId = 'ten_1'): ReserveInput => ({
  tenantId,
  callId,
  tokens,
  source: 'chat_reply',
  sourceId: callId,
  ttlMs: 60_000,
});
const credits = async (s: Store = store, tenantId = 'ten_1') => creditsOf(await s.collection(accounts).get(tenantId));

const usageEvent = (callId: string, inputTokens: number, outputTokens: number, tenantId = 'ten_1') =>
  usageMessage(callId, inputTokens, tenantId, { outputTokens });
const handle = () => billingEventHandler(store, { creditsPer1kTokens: PER_1K, startingGrant: 0 }, logger);

it('reserves against the balance minus open reservations, and refuses with 402 what does not fit', async () => {
  await grant('ten_1', 100);
  await reserve(store, hold('c1', 60), PER_1K);
  expect(await credits()).toEqual({ balance: 100, reserved: 60, available: 40 });
  const refused = await reserve(store, hold('c2', 41), PER_1K).catch((e: unknown) => e);
  expect(isAppError(refused) && refused.code).toBe('INSUFFICIENT_CREDITS');
  expect(isAppError(refused) && refused.details).toMatchObject({ available: 40, required: 41 });
  await reserve(store, hold('c3', 40), PER_1K);
  expect(await credits()).toEqual({ balance: 100, reserved: 100, available: 0 });
  // Nothing left: even a call of no cost is refused.
  await expect(reserve(store, hold('c4', 0), PER_1K)).rejects.toMatchObject({ code: 'INSUFFICIENT_CREDITS' });
});

it("opens a tenant's account with its grant (openAccount) at its first reservation, outside the transaction, once", async () => {
  const opened: string[] = [];
  const openAccount = async (tenantId: string) => {
    opened.push(tenantId);
    await grant(tenantId, 100);
  };
  const first = await reserve(store, hold('c1', 30, 'ten_new'), PER_1K, openAccount);
  expect(first.credits).toEqual({ balance: 100, reserved: 30, available: 70 });
  await reserve(store, hold('c2', 30, 'ten_new'), PER_1K, openAccount);
  expect(opened).toEqual(['ten_new']);
  expect(await credits(store, 'ten_new')).toEqual({ balance: 100, reserved: 60, available: 40 });
});

it('is idempotent per call: a retried reservation answers the same hold and counts once', async () => {
  await grant('ten_1', 100);
  const first = await reserve(store, hold('c1', 30), PER_1K);
  const again = await Promise.all([reserve(store, hold('c1', 30), PER_1K), reserve(store, hold('c1', 30), PER_1K)]);
  expect(again.map((r) => r.doc.id)).toEqual([first.doc.id, first.doc.id]);
  expect(await credits()).toEqual({ balance: 100, reserved: 30, available: 70 });
  expect(await store.collection(reservations).count({ tenantId: 'ten_1' })).toBe(1);
});

// Across replicas (processes on one store) the e2e test test/e2e/reservations.test.ts checks the same.
it('is exact under concurrency: 40 racing holds of 10 on 100 credits give 10, the rest 402', async () => {
  await grant('ten_1', 100);
  const results = await Promise.allSettled(Array.from({ length: 40 }, (_, i) => reserve(store, hold(`c${i}`, 10), PER_1K)));
  const accepted = results.filter((r) => r.status === 'fulfilled').length;
  const refused = results.filter((r) => r.status === 'rejected' && isAppError(r.reason) && r.reason.code === 'INSUFFICIENT_CREDITS');
  expect(accepted).toBe(10);
  expect(refused).toHaveLength(30);
  expect(await credits()).toEqual({ balance: 100, reserved: 100, available: 0 });
});

it('is exact in a group commit: the holds of one turn share a transaction, the 402s fail alone, a retry answers its hold', async () => {
  await grant('ten_1', 100);
  await grant('ten_2', 15);
  let transactions = 0;
  const counted = Object.assign(Object.create(store) as Store, {
    transaction: (fn: Parameters<Store['transaction']>[0]) => (transactions++, store.transaction(fn)),
  });
  const group = new GroupCommit(counted);
  const asks = [
    ...Array.from({ length: 40 }, (_, i) => hold(`c${i}`, 10)),
    hold('c0', 10), // a retry of c0 in the same turn
    hold('t2', 10, 'ten_2'),
    hold('t2b', 10, 'ten_2'),
  ];
  const results = await Promise.allSettled(asks.map((ask) => reserve(counted, ask, PER_1K, undefined, group)));
  expect(transactions).toBe(1);
  const refused = results.filter((r) => r.status === 'rejected' && isAppError(r.reason) && r.reason.code === 'INSUFFICIENT_CREDITS');
  expect(refused).toHaveLength(31);
  const docOf = (r: PromiseSettledResult<Awaited<ReturnType<typeof reserve>>>) => (r.status === 'fulfilled' ? r.value.doc : r.reason);
  expect(docOf(results[40])).toEqual(docOf(results[0]));
  expect(await credits()).toEqual({ balance: 100, reserved: 100, available: 0 });
  expect(await credits(store, 'ten_2')).toEqual({ balance: 15, reserved: 10, available: 5 });
  expect(await store.collection(reservations).count({ status: 'open' })).toBe(11);
});

it("settles a reservation with the call's usage once per call id, whoever reports it and however often", async () => {
  await grant('ten_1', 100);
  await reserve(store, hold('c1', 50), PER_1K);
  await handle()(usageEvent('c1', 10, 20));
  expect(await credits()).toEqual({ balance: 70, reserved: 0, available: 70 });
  // The same event again, and another event for the same call (a sweep's estimate after a crash): nothing more.
  const redelivered = usageEvent('c1', 10, 20);
  await handle()(redelivered);
  await handle()(redelivered);
  await handle()(usageEvent('c1', 5, 5));
  expect(await credits()).toEqual({ balance: 70, reserved: 0, available: 70 });
  expect(await store.collection(ledger).count({ tenantId: 'ten_1' })).toBe(2); // the grant and one usage entry
  expect((await store.collection(reservations).get('ten_1:c1'))?.status).toBe('settled');
});

it('releases a reservation on an event with no tokens or on Release, once', async () => {
  await grant('ten_1', 100);
  await reserve(store, hold('c1', 50), PER_1K);
  await reserve(store, hold('c2', 20), PER_1K);
  await handle()(usageEvent('c1', 0, 0));
  expect(await credits()).toEqual({ balance: 100, reserved: 20, available: 80 });
  expect(await store.transaction((tx) => closeReservation(tx, 'ten_1', 'c2', 'released'))).not.toBeNull();
  expect(await store.transaction((tx) => closeReservation(tx, 'ten_1', 'c2', 'released'))).toBeNull();
  expect(await credits()).toEqual({ balance: 100, reserved: 0, available: 100 });
  expect(await store.collection(ledger).count({ tenantId: 'ten_1' })).toBe(1);
  // A call released and billed later (its generator was alive after all) is billed, once.
  await handle()(usageEvent('c1', 3, 4));
  expect(await credits()).toEqual({ balance: 93, reserved: 0, available: 93 });
});

it("expires a reservation after the sweeper saw it open for its TTL on its own clock; the call's usage still bills once", async () => {
  await grant('ten_1', 100);
  await reserve(store, { ...hold('c1', 50), ttlMs: 1000 }, PER_1K);
  await reserve(store, { ...hold('c2', 10), ttlMs: 5000 }, PER_1K);
  let now = 0;
  const sweeper = new ReservationSweeper(store, logger, 100, () => now);
  expect(await sweeper.sweep()).toBe(0); // first sighting
  now = 999;
  expect(await sweeper.sweep()).toBe(0);
  now = 1000;
  const expiredBefore = (await domainMetrics.reservationsExpired.get()).values[0]?.value ?? 0;
  expect(await sweeper.sweep()).toBe(1);
  expect((await store.collection(reservations).get('ten_1:c1'))?.status).toBe('expired');
  // Counted for the expiry alert (svc_credit_reservations_expired_total).
  expect((await domainMetrics.reservationsExpired.get()).values[0]?.value).toBe(expiredBefore + 1);
  expect(await credits()).toEqual({ balance: 100, reserved: 10, available: 90 });
  now = 5000;
  expect(await sweeper.sweep()).toBe(1);
  expect(await credits()).toEqual({ balance: 100, reserved: 0, available: 100 });
  await handle()(usageEvent('c1', 10, 10));
  await handle()(usageEvent('c1', 10, 10));
  expect(await credits()).toEqual({ balance: 80, reserved: 0, available: 80 });
});
