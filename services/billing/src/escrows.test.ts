import { createLogger } from '@svc/kit';
import { storePerTest, usageMessage } from '../test/fixtures/unit';
import { accounts, escrows, ledger } from './collections';
import { EscrowSweeper, grantEscrow, renewEscrow, sliceFor, type EscrowPolicy } from './escrows';
import { billingEventHandler } from './events';
import { addEntry, applyOnce } from './ledger';
import { creditsOf } from './reservations';

// A token is a credit (1,000 credits per 1,000 tokens), so the sums read plainly.
const PER_1K = 1000;
const POLICY: EscrowPolicy = { maxCredits: 1000, shareDivisor: 8, minHolds: 8, leaseMs: 1000, graceMs: 5000 };
const logger = createLogger('billing-test', 'silent');
const db = storePerTest('escrows');

const addCredits = (credits: number, tenantId = 'ten_1') =>
  applyOnce(db.store, (tx) => addEntry(tx, { tenantId, sourceKey: `grant:${tenantId}`, kind: 'grant', credits, description: 'grant' }));
const credits = async (tenantId = 'ten_1') => creditsOf(await db.store.collection(accounts).get(tenantId));
const ask = (requestId: string, holdCredits = 10, tenantId = 'ten_1') => ({ tenantId, holder: 'chat-a', requestId, holdCredits });

const usageEvent = (callId: string, tokens: number, escrowId?: string) =>
  usageMessage(callId, tokens, 'ten_1', { credentialId: 'usr_1', credentialType: 'user', ...(escrowId ? { escrowId } : {}) });
const handle = () => billingEventHandler(db.store, { creditsPer1kTokens: PER_1K, startingGrant: 0 }, logger);

it('grants a slice only when it covers several holds, at most an eighth of what is available and the cap', () => {
  expect(sliceFor(800, 10, POLICY)).toBe(100);
  expect(sliceFor(100_000, 10, POLICY)).toBe(1000);
  // An eighth of 600 is 75, less than 8 holds of 10: the calls reserve one by one.
  expect(sliceFor(600, 10, POLICY)).toBe(0);
  expect(sliceFor(0, 0, POLICY)).toBe(0);
});

it('moves the slice into reserved, idempotently per request, and refuses when the balance is small', async () => {
  await addCredits(800);
  const first = await grantEscrow(db.store, ask('r1'), POLICY);
  expect(first).toMatchObject({ granted: true, available: 700, escrow: { granted: 100, remaining: 100, status: 'open' } });
  const again = await Promise.all([grantEscrow(db.store, ask('r1'), POLICY), grantEscrow(db.store, ask('r1'), POLICY)]);
  expect(again.map((g) => g.escrow?.id)).toEqual([first.escrow!.id, first.escrow!.id]);
  expect(await credits()).toEqual({ balance: 800, reserved: 100, available: 700 });
  // Another tenant's request id is another escrow; a hold as large as a seventh of what is left is not worth one.
  expect((await grantEscrow(db.store, ask('r2', 100), POLICY)).granted).toBe(false);
  expect(await credits()).toEqual({ balance: 800, reserved: 100, available: 700 });
});

it('settles a carved call from the slice once: reserved and balance fall together, available stays', async () => {
  await addCredits(800);
  const { escrow } = await grantEscrow(db.store, ask('r1'), POLICY);
  const h = handle();
  await h(usageEvent('c1', 30, escrow!.id));
  await h(usageEvent('c1', 30, escrow!.id)); // redelivered: billed once
  expect(await credits()).toEqual({ balance: 770, reserved: 70, available: 700 });
  expect((await db.store.collection(escrows).get(escrow!.id))!.remaining).toBe(70);
  expect(
    (await db.store.collection(ledger).find({ tenantId: 'ten_1' }, { limit: 10 })).items.filter((e) => e.kind === 'usage'),
  ).toHaveLength(1);
  // A call whose usage went past what the slice holds takes the rest from available, as a reservation's settle does.
  await h(usageEvent('c2', 90, escrow!.id));
  expect(await credits()).toEqual({ balance: 680, reserved: 0, available: 680 });
});

it('gives back at most what the escrow holds, and a closed escrow is neither renewed nor returned again', async () => {
  await addCredits(800);
  const { escrow } = await grantEscrow(db.store, ask('r1'), POLICY);
  await handle()(usageEvent('c1', 30, escrow!.id));
  const renewed = await renewEscrow(db.store, { tenantId: 'ten_1', id: escrow!.id, returnCredits: 50, close: false });
  expect(renewed.escrow).toMatchObject({ status: 'open', remaining: 20, beat: 1 });
  expect(await credits()).toEqual({ balance: 770, reserved: 20, available: 750 });
  // Asked to return more than it holds: only what it holds goes back.
  const closed = await renewEscrow(db.store, { tenantId: 'ten_1', id: escrow!.id, returnCredits: 1000, close: true });
  expect(closed.escrow).toMatchObject({ status: 'closed', remaining: 0 });
  expect(await credits()).toEqual({ balance: 770, reserved: 0, available: 770 });
  const after = await renewEscrow(db.store, { tenantId: 'ten_1', id: escrow!.id, returnCredits: 10, close: false });
  expect(after.escrow.status).toBe('closed');
  expect(await credits()).toEqual({ balance: 770, reserved: 0, available: 770 });
  // Another tenant cannot touch it.
  await expect(renewEscrow(db.store, { tenantId: 'ten_2', id: escrow!.id, returnCredits: 0, close: false })).rejects.toMatchObject({
    code: 'RESOURCE_NOT_FOUND',
  });
});

it('expires an escrow only after seeing it unrenewed for lease plus grace on its own clock; a restart starts over', async () => {
  await addCredits(800);
  const { escrow } = await grantEscrow(db.store, ask('r1'), POLICY);
  let now = 0;
  const sweeper = new EscrowSweeper(db.store, logger, 1000, () => now);
  await sweeper.sweep(); // first sighting
  now = 5999;
  expect(await sweeper.sweep()).toBe(0);
  // A renewal moves the beat: the wait starts again.
  await renewEscrow(db.store, { tenantId: 'ten_1', id: escrow!.id, returnCredits: 0, close: false });
  now = 6500;
  expect(await sweeper.sweep()).toBe(0);
  now = 12_000;
  expect(await sweeper.sweep()).toBe(0);
  // A billing restart: a new sweeper has seen nothing, so it waits the whole time again.
  let later = 100_000;
  const restarted = new EscrowSweeper(db.store, logger, 1000, () => later);
  expect(await restarted.sweep()).toBe(0);
  await handle()(usageEvent('c1', 30, escrow!.id));
  later += 5999;
  expect(await restarted.sweep()).toBe(0);
  later += 1;
  expect(await restarted.sweep()).toBe(1);
  // What the slice still held goes back; a call settled after the expiry debits the balance alone.
  expect(await credits()).toEqual({ balance: 770, reserved: 0, available: 770 });
  expect((await db.store.collection(escrows).get(escrow!.id))!.status).toBe('expired');
  await handle()(usageEvent('c2', 20, escrow!.id));
  expect(await credits()).toEqual({ balance: 750, reserved: 0, available: 750 });
});

it('a returned escrow with calls still settling is spent by them, then expired with the rest', async () => {
  await addCredits(800);
  const { escrow } = await grantEscrow(db.store, ask('r1'), POLICY);
  // The holder gives back all but one open call's hold of 40, and closes.
  const closed = await renewEscrow(db.store, { tenantId: 'ten_1', id: escrow!.id, returnCredits: 60, close: true });
  expect(closed.escrow).toMatchObject({ status: 'returned', remaining: 40 });
  await handle()(usageEvent('c1', 25, escrow!.id));
  expect(await credits()).toEqual({ balance: 775, reserved: 15, available: 760 });
  let now = 0;
  const sweeper = new EscrowSweeper(db.store, logger, 1000, () => now);
  await sweeper.sweep();
  now = 6000;
  expect(await sweeper.sweep()).toBe(1);
  expect(await credits()).toEqual({ balance: 775, reserved: 0, available: 775 });
});
