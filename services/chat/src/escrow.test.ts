import { createLogger } from '@svc/kit';
import { CreditEscrow, type EscrowBilling } from './escrow';

const logger = createLogger('chat-test', 'silent');
const SETTINGS = { idleMs: 2000, declinedMs: 1000, tickMs: 100 };

/** Billing as the escrow sees it: what it granted, renewals (with what came back) and whether they close. */
function fakeBilling(grant: { granted: boolean; credits: number; leaseMs: number; available?: number }) {
  const calls = { grants: 0, renewals: [] as Array<{ returnCredits: number; close: boolean }> };
  let status = 'open';
  let available = grant.available ?? 10_000;
  const billing: EscrowBilling = {
    async grantEscrow() {
      calls.grants++;
      return {
        granted: grant.granted,
        escrowId: grant.granted ? `esc_${calls.grants}` : '',
        credits: grant.credits,
        leaseMs: grant.leaseMs,
        available,
      };
    },
    async renewEscrow(_token, req) {
      calls.renewals.push({ returnCredits: req.returnCredits, close: req.close });
      if (req.close) status = 'returned';
      return { status, remaining: 0, leaseMs: grant.leaseMs, available };
    },
  };
  return { billing, calls, expire: () => (status = 'expired'), setAvailable: (n: number) => (available = n) };
}

it('carves holds while the slice covers them, and counts each ended call by its cost (unknown: its whole hold)', async () => {
  let now = 0;
  const { billing, calls } = fakeBilling({ granted: true, credits: 100, leaseMs: 3000 });
  const escrow = new CreditEscrow(billing, logger, SETTINGS, () => now);
  const id = await escrow.carve('ten_1', 'tok', 'c1', 40);
  expect(id).toBe('esc_1');
  expect(await escrow.carve('ten_1', 'tok', 'c2', 40)).toBe('esc_1');
  expect(escrow.sliceState('ten_1')).toMatchObject({ granted: 100, held: 80, free: 20 });
  escrow.ended('esc_1', 'c1', 25);
  escrow.ended('esc_1', 'c1', 25); // once per call
  escrow.ended('esc_1', 'c2', null);
  expect(escrow.sliceState('ten_1')).toMatchObject({ held: 0, spent: 65, free: 35 });
  // 35 free cannot hold 40: the call reserves on its own, the slice drains (given back once idle of calls), and
  // the next call is granted a new one.
  now = 10;
  expect(await escrow.carve('ten_1', 'tok', 'c3', 40)).toBe('esc_2');
  expect(calls.grants).toBe(2);
  await escrow.tick();
  expect(calls.renewals).toEqual([{ returnCredits: 35, close: true }]);
});

it('carves only within the lease, on its own clock from when the grant was sent', async () => {
  let now = 0;
  let answerAt = 0;
  const fake = fakeBilling({ granted: true, credits: 100, leaseMs: 3000 });
  const billing: EscrowBilling = {
    grantEscrow: async (t, r) => {
      now = answerAt; // the answer arrives late: the lease still counts from the sending
      return fake.billing.grantEscrow(t, r);
    },
    renewEscrow: (t, r) => fake.billing.renewEscrow(t, r),
  };
  answerAt = 1000;
  const escrow = new CreditEscrow(billing, logger, SETTINGS, () => now);
  expect(await escrow.carve('ten_1', 'tok', 'c1', 5)).toBe('esc_1');
  now = 2999;
  expect(await escrow.carve('ten_1', 'tok', 'c2', 5)).toBe('esc_1');
  // Not renewed (the tick is what renews): past 3000 from the sending, no carving from it.
  now = 3000;
  answerAt = 3000;
  escrow.ended('esc_1', 'c1', 5);
  escrow.ended('esc_1', 'c2', 5);
  expect(await escrow.carve('ten_1', 'tok', 'c3', 5)).toBe('esc_2');
  // A renewal answered extends it from when it was sent.
  now = 4000;
  await escrow.tick();
  expect(escrow.sliceState('ten_1')).toMatchObject({ id: 'esc_2', valid: true });
  now = 6999;
  expect(escrow.sliceState('ten_1')!.valid).toBe(true);
  now = 7000;
  expect(escrow.sliceState('ten_1')!.valid).toBe(false);
});

it('reserves per call for a while after billing declines, and gives back idle or expired slices', async () => {
  let now = 0;
  const declined = fakeBilling({ granted: false, credits: 0, leaseMs: 3000 });
  const low = new CreditEscrow(declined.billing, logger, SETTINGS, () => now);
  expect(await low.carve('ten_1', 'tok', 'c1', 5)).toBeNull();
  expect(await low.carve('ten_1', 'tok', 'c2', 5)).toBeNull();
  expect(declined.calls.grants).toBe(1);
  now = 1000;
  expect(await low.carve('ten_1', 'tok', 'c3', 5)).toBeNull();
  expect(declined.calls.grants).toBe(2);

  now = 0;
  const fake = fakeBilling({ granted: true, credits: 100, leaseMs: 3000 });
  const escrow = new CreditEscrow(fake.billing, logger, SETTINGS, () => now);
  await escrow.carve('ten_1', 'tok', 'c1', 30);
  escrow.ended('esc_1', 'c1', 10);
  // Idle for idleMs: everything not spent goes back, and the escrow closes.
  now = 2000;
  await escrow.tick();
  expect(fake.calls.renewals).toEqual([{ returnCredits: 90, close: true }]);
  expect(escrow.sliceState('ten_1')).toBeNull();

  // Billing expired it (no renewal reached it): dropped, never carved from again.
  const other = fakeBilling({ granted: true, credits: 100, leaseMs: 3000 });
  const third = new CreditEscrow(other.billing, logger, SETTINGS, () => now);
  await third.carve('ten_1', 'tok', 'c1', 30);
  other.expire();
  now = 3000;
  await third.tick();
  expect(third.sliceState('ten_1')).toBeNull();
});

it('gives its slice back when the tenant has less credit outside escrows than the slice', async () => {
  let now = 0;
  const fake = fakeBilling({ granted: true, credits: 100, leaseMs: 3000 });
  const escrow = new CreditEscrow(fake.billing, logger, SETTINGS, () => now);
  await escrow.carve('ten_1', 'tok', 'c1', 30);
  fake.setAvailable(50);
  now = 1000;
  await escrow.tick(); // renewed: billing says 50 are left outside escrows, less than the slice
  expect(escrow.sliceState('ten_1')).toBeNull();
  escrow.ended('esc_1', 'c1', 20);
  await escrow.tick();
  expect(fake.calls.renewals.at(-1)).toEqual({ returnCredits: 80, close: true });
});
