/**
 * Credit escrows (docs/decisions.md, "per-process credit escrow"): a slice of a tenant's available credits held for
 * one chat process, so that process reserves its calls' holds in memory instead of asking billing for each. The slice
 * is moved into the account's `reserved` in the grant's transaction, exactly as a reservation's hold is, so nothing
 * else can reserve it; every call carved from it settles with its `llm.usage` event (which names the escrow), taking
 * the call's cost out of the slice: `remaining`, `reserved` and `balance` fall together, `available` does not move.
 * The holder gives back what no call of its holds (RenewEscrow's `return_credits`), never more than `remaining`.
 *
 * Leases compare no clocks: the holder carves only while its lease is valid by its own monotonic clock, measured from
 * when it *sent* the grant or renewal, so its view ends first. Billing expires an escrow after it has itself seen it
 * unrenewed (kit LeaseWatch) for the lease plus the longest a call may run (the reservation TTL): by then every call
 * carved before the holder's lease ended has settled (or its reply's sweep billed it), and only the rest goes back to
 * `available`. A billing restart forgets what it saw, which only postpones an expiry.
 */
import { AppError, DuplicateKeyError, monotonicNow, nowIso, pages, StaleSweeper } from '@svc/kit';
import type { Logger, Store, StoreSession } from '@svc/kit';
import { accounts, escrows, type EscrowDoc } from './collections';
import { accountOf } from './ledger';
import { creditsOf } from './reservations';
import type { Tally } from './tally';

export interface EscrowPolicy {
  /** The largest slice granted (BILLING_ESCROW_MAX_CREDITS). */
  maxCredits: number;
  /** A slice is at most this part of the tenant's available credits (1/8). */
  shareDivisor: number;
  /** A slice must cover at least this many holds of the call that asks (8), else the caller reserves per call. */
  minHolds: number;
  /** The holder's lease (BILLING_ESCROW_LEASE_MS). */
  leaseMs: number;
  /** The longest a call carved from it may run before its settle (the reservation TTL). */
  graceMs: number;
}

export const DEFAULT_ESCROW_POLICY: EscrowPolicy = { maxCredits: 100_000, shareDivisor: 8, minHolds: 8, leaseMs: 5000, graceMs: 600_000 };

/** The slice a tenant with `available` credits is granted for calls of `hold` credits, or 0 for none. */
export function sliceFor(available: number, hold: number, policy: EscrowPolicy): number {
  const slice = Math.min(policy.maxCredits, Math.floor(available / policy.shareDivisor));
  return slice >= policy.minHolds * Math.max(1, hold) ? slice : 0;
}

export interface Grant {
  granted: boolean;
  escrow?: EscrowDoc;
  available: number;
}

const escrowId = (tenantId: string, requestId: string) => `${tenantId}:esc:${requestId}`;

export function validGrant(input: { requestId: string; holder: string; holdCredits: number }): string | null {
  if (!input.requestId || input.requestId.length > 200) return 'requestId must be 1 to 200 characters';
  if (!input.holder || input.holder.length > 200) return 'holder must be 1 to 200 characters';
  if (!Number.isInteger(input.holdCredits) || input.holdCredits < 0 || input.holdCredits > 1e12) return 'holdCredits must be 0 to 1e12';
  return null;
}

/**
 * Grants an escrow to `holder` when the tenant's available credits make it worth one (sliceFor), in one transaction
 * on the account document, as a reservation is; a retry of the same request answers the escrow it granted.
 */
export async function grantEscrow(
  store: Store,
  input: { tenantId: string; holder: string; requestId: string; holdCredits: number },
  policy: EscrowPolicy,
): Promise<Grant> {
  const id = escrowId(input.tenantId, input.requestId);
  for (let attempt = 1; ; attempt++) {
    try {
      return await store.transaction(async (tx) => {
        const found = await tx.collection(escrows).get(id, { tenantId: input.tenantId });
        if (found)
          return { granted: true, escrow: found, available: creditsOf(await tx.collection(accounts).get(input.tenantId)).available };
        const account = creditsOf(await accountOf(tx, input.tenantId));
        const credits = sliceFor(account.available, input.holdCredits, policy);
        if (credits <= 0) return { granted: false, available: account.available };
        const now = nowIso();
        const escrow = await tx.collection(escrows).insert({
          id,
          tenantId: input.tenantId,
          holder: input.holder,
          granted: credits,
          remaining: credits,
          status: 'open',
          beat: 0,
          leaseMs: policy.leaseMs,
          graceMs: policy.graceMs,
          createdAt: now,
          closedAt: null,
        });
        const moved = await tx.collection(accounts).increment(input.tenantId, {}, { reserved: credits });
        return { granted: true, escrow, available: creditsOf(moved).available };
      });
    } catch (err) {
      // Two retries of one grant raced on the id: the loser answers the winner's escrow.
      if (!(err instanceof DuplicateKeyError) || attempt >= 3) throw err;
    }
  }
}

/**
 * Renews an open escrow's lease (its beat moves: every watcher's wait starts again) and gives back `returnCredits`
 * of it, never more than it still holds; `close` ends the holder's use (status `returned`, or `closed` when nothing
 * is left). An escrow no longer open answers as it is, unchanged.
 */
export async function renewEscrow(
  store: Store,
  input: { tenantId: string; id: string; returnCredits: number; close: boolean },
): Promise<{ escrow: EscrowDoc; available: number }> {
  return store.transaction(async (tx) => {
    const col = tx.collection(escrows);
    const found = await col.get(input.id, { tenantId: input.tenantId });
    if (!found) throw new AppError('RESOURCE_NOT_FOUND', 'No such escrow');
    if (found.status !== 'open')
      return { escrow: found, available: creditsOf(await tx.collection(accounts).get(input.tenantId)).available };
    const back = Math.min(Math.max(0, Math.floor(input.returnCredits)), found.remaining);
    const remaining = found.remaining - back;
    const status = input.close ? (remaining > 0 ? 'returned' : 'closed') : 'open';
    const escrow = await col.update(
      found.id,
      { status: 'open', beat: found.beat },
      { remaining, beat: found.beat + 1, status, ...(status === 'closed' ? { closedAt: nowIso() } : {}) },
    );
    // The holder renews one request at a time: another writer here is a retry of this one, which the caller repeats.
    if (!escrow) throw new AppError('CONFLICT', 'The escrow changed meanwhile; renew again');
    const account = back
      ? await tx.collection(accounts).increment(input.tenantId, {}, { reserved: -back })
      : await tx.collection(accounts).get(input.tenantId);
    return { escrow, available: creditsOf(account).available };
  });
}

/**
 * A call carved from an escrow settles: its cost comes out of the escrow, in the transaction that adds its ledger
 * entry (which moves the balance), so `reserved` falls with `balance` and `available` stays. Never more than the
 * escrow still holds (a call whose usage went past its hold takes the rest from `available`, as a reservation's
 * settle does); an expired escrow gave its credits back already, so nothing is taken from it.
 */
export async function spendEscrow(tx: StoreSession, tenantId: string, id: string, credits: number, tally: Tally): Promise<number> {
  const col = tx.collection(escrows);
  const found = await col.get(id, { tenantId });
  if (!found || found.status === 'expired' || found.status === 'closed' || found.remaining <= 0 || credits <= 0) return 0;
  const take = Math.min(credits, found.remaining);
  await col.increment(id, {}, { remaining: -take });
  tally.reserved(tenantId, -take);
  return take;
}

/** Gives back what an escrow still holds once it is past its lease and every call's longest run (see the top). */
async function expireEscrow(store: Store, seen: EscrowDoc): Promise<boolean> {
  return store.transaction(async (tx) => {
    const col = tx.collection(escrows);
    // Read in this transaction, not taken from the sighting: a settle may have spent some since.
    const current = await col.get(seen.id);
    if (!current || current.status !== seen.status || current.beat !== seen.beat) return false;
    const expired = await col.update(
      seen.id,
      { status: seen.status, beat: seen.beat, remaining: current.remaining },
      { status: 'expired', remaining: 0, closedAt: nowIso() },
    );
    if (!expired) return false;
    if (current.remaining > 0) await tx.collection(accounts).increment(seen.tenantId, {}, { reserved: -current.remaining });
    return true;
  });
}

/** Expires escrows their holder stopped renewing (it died, or lost billing), on billing's own clock. */
export class EscrowSweeper extends StaleSweeper {
  constructor(
    private readonly store: Store,
    logger: Logger,
    intervalMs: number,
    now: () => number = monotonicNow,
  ) {
    super(logger, intervalMs, 'escrows', now);
  }

  protected async pass(): Promise<number> {
    let expired = 0;
    for (const status of ['open', 'returned'] as const)
      for await (const page of pages(this.store.collection(escrows), { status }, { limit: 500, order: 'asc' }))
        for (const e of page) {
          if (!this.watch.stale(e.id, `${e.status}:${e.beat}`, e.leaseMs + e.graceMs)) continue;
          this.watch.forget(e.id);
          if (await expireEscrow(this.store, e)) expired++;
        }
    if (expired) this.logger.warn({ expired }, 'expired escrows their holder stopped renewing');
    return expired;
  }
}
