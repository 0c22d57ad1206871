/**
 * Credit reservations (CONTRACT.md 8): a model call is accepted only when its most possible cost fits in the
 * tenant's available credits (balance minus open reservations). The account keeps `reserved`, the sum of its open
 * reservations, moved in the same transaction as each reservation opens or closes, so the check reads one document
 * and concurrent reservations of a tenant serialise on it (SQLite runs one writer at a time; MongoDB aborts and
 * retries all but one of the transactions that wrote it): no number of replicas can reserve past the balance.
 *
 * A reservation closes once: settled by the call's `llm.usage` event (in the transaction that adds the ledger entry,
 * see events.ts), released (an event with no tokens, or Release), or expired by billing's own sweep. Expiry compares
 * no clocks across machines: a sweeper expires a reservation after it has itself seen it open for its TTL on its
 * own monotonic clock (kit LeaseWatch), so a billing restart only postpones an expiry.
 */
import { AppError, DuplicateKeyError, monotonicNow, nowIso, pages, StaleSweeper } from '@svc/kit';
import type { GroupCommit, Logger, Store, StoreSession } from '@svc/kit';
import { domainMetrics } from '@svc/contracts';
import { accounts, reservations, type ReservationDoc, type ReservationStatus } from './collections';
import { holdKeyBudget, type KeyBudget } from './key-budget';
import { accountOf } from './ledger';
import { holdCost, invalidPrice, type ModelPrice } from '@svc/llm/pricing';
import { Tally } from './tally';

const MAX_TOKENS = 100_000_000;
const MAX_TTL_MS = 24 * 3600_000;

export interface ReserveInput {
  tenantId: string;
  callId: string;
  tokens: number;
  source: string;
  sourceId: string;
  ttlMs: number;
  /** The calling API key's credit budget, when it has one: the reservation must fit in it too (key-budget.ts). */
  keyBudget?: KeyBudget;
  /**
   * The model's price (CONTRACT.md 12): the hold is `inputTokens` (the prompt's bound) and `outputTokens` (the
   * output bound) at it, and `tokens` is ignored. Absent: `tokens` at the default price.
   */
  price?: Omit<ModelPrice, 'source'>;
  inputTokens?: number;
  outputTokens?: number;
}

/** The credits a reservation holds: its bounds at the call's price, else its tokens at the default price. */
export function holdCredits(input: ReserveInput, per1k: number): number {
  return holdCost(input, per1k);
}

export interface Credits {
  balance: number;
  reserved: number;
  available: number;
}

export function creditsOf(account: { balance: number; reserved?: number } | null): Credits {
  const balance = account?.balance ?? 0;
  const reserved = account?.reserved ?? 0;
  return { balance, reserved, available: balance - reserved };
}

const reservationId = (tenantId: string, callId: string) => `${tenantId}:${callId}`;

export function validReserve(input: ReserveInput): string | null {
  if (!input.callId || input.callId.length > 200) return 'callId must be 1 to 200 characters';
  if (!Number.isInteger(input.tokens) || input.tokens < 0 || input.tokens > MAX_TOKENS) return `tokens must be 0 to ${MAX_TOKENS}`;
  if (!Number.isInteger(input.ttlMs) || input.ttlMs < 1 || input.ttlMs > MAX_TTL_MS) return `ttlMs must be 1 to ${MAX_TTL_MS}`;
  for (const field of ['inputTokens', 'outputTokens'] as const) {
    const n = input[field];
    if (n !== undefined && (!Number.isInteger(n) || n < 0 || n > MAX_TOKENS)) return `${field} must be 0 to ${MAX_TOKENS}`;
  }
  return validModelPrice(input.price);
}

/** A price as callers send it, or why not: credits per million tokens, each 0 to 1e9. */
export function validModelPrice(price: Omit<ModelPrice, 'source'> | undefined): string | null {
  return invalidPrice(price);
}

/**
 * Opens the call's reservation, or answers the one it already has (a retry). Refused with 402 INSUFFICIENT_CREDITS
 * when its credits (at least 1: a tenant with nothing left starts nothing) exceed what is available, or (reason
 * `key_budget_exhausted`) what is left of the calling key's budget. `openAccount`: how a tenant without an account
 * yet gets one (its starting grant), run outside the transaction when it finds none, before trying again; without it
 * the account starts empty. `group`: the reservation joins the process's group commit (the others asked for in the
 * same turn share its transaction and commit) unless it holds a key's budget, whose usage document may be written
 * before a refusal: such a reservation runs alone, so no other is committed or rolled back with it.
 */
export async function reserve(
  store: Store,
  input: ReserveInput,
  per1k: number,
  openAccount?: (tenantId: string) => Promise<unknown>,
  group?: GroupCommit,
): Promise<{ doc: ReservationDoc; credits: Credits }> {
  const credits = holdCredits(input, per1k);
  const id = reservationId(input.tenantId, input.callId);
  let opened = !openAccount;
  // A refusal (INSUFFICIENT_CREDITS, an AppError) comes before any write: in a group it fails this reservation only.
  const transaction: Store['transaction'] = group && !input.keyBudget ? (body) => group.commit(body) : (body) => store.transaction(body);
  for (let races = 0; ;) {
    try {
      const reserved = await transaction(async (tx) => {
        const found = await tx.collection(reservations).get(id);
        if (found) return { doc: found, credits: creditsOf(await tx.collection(accounts).get(input.tenantId)) };
        // The account is read here only: a tenant's first call (its tenant.created still on its way) opens it first.
        const stored = await tx.collection(accounts).get(input.tenantId);
        if (!stored && !opened) return null;
        const account = creditsOf(stored ?? (await accountOf(tx, input.tenantId)));
        if (account.available < Math.max(1, credits))
          throw new AppError('INSUFFICIENT_CREDITS', 'Not enough credits available for this call: buy credits or redeem a gift card', {
            ...account,
            required: Math.max(1, credits),
          });
        if (input.keyBudget) await holdKeyBudget(tx, input.tenantId, input.keyBudget, credits);
        const doc = await tx.collection(reservations).insert({
          id,
          tenantId: input.tenantId,
          callId: input.callId,
          credits,
          source: input.source,
          sourceId: input.sourceId,
          status: 'open',
          ttlMs: input.ttlMs,
          ...(input.keyBudget
            ? { apiKeyId: input.keyBudget.keyId, keyBudget: { credits: input.keyBudget.credits, period: input.keyBudget.period } }
            : {}),
          createdAt: nowIso(),
          closedAt: null,
        });
        const moved = await tx.collection(accounts).increment(input.tenantId, {}, { reserved: credits });
        return { doc, credits: creditsOf(moved) };
      });
      if (reserved) return reserved;
      await openAccount!(input.tenantId);
      opened = true;
    } catch (err) {
      // Two retries of one call raced on the id: the loser answers the winner's reservation.
      if (!(err instanceof DuplicateKeyError) || ++races >= 3) throw err;
    }
  }
}

/**
 * Closes the call's reservation if it is still open, in the caller's transaction (a settle closes it with the
 * ledger entry). Returns the closed reservation, or null when there was none open. The account's and the key's
 * `reserved` move in `tally` when given (written at its flush, with the rest of a batch), else at once.
 */
export async function closeReservation(
  tx: StoreSession,
  tenantId: string,
  callId: string,
  status: Exclude<ReservationStatus, 'open'>,
  tally?: Tally,
): Promise<ReservationDoc | null> {
  const id = reservationId(tenantId, callId);
  const closed = await tx.collection(reservations).update(id, { status: 'open' }, { status, closedAt: nowIso() });
  if (!closed) return null;
  const moves = tally ?? new Tally(tx);
  moves.reserved(tenantId, -closed.credits);
  if (closed.apiKeyId) moves.keyReserved(tenantId, closed.apiKeyId, -closed.credits);
  if (!tally) await moves.flush();
  return closed;
}

/** Expires reservations nothing settled or released in their TTL (their caller died, or lost its event). */
export class ReservationSweeper extends StaleSweeper {
  constructor(
    private readonly store: Store,
    logger: Logger,
    intervalMs: number,
    now: () => number = monotonicNow,
  ) {
    super(logger, intervalMs, 'reservations', now);
  }

  protected async pass(): Promise<number> {
    let expired = 0;
    for await (const page of pages(this.store.collection(reservations), { status: 'open' }, { limit: 500, order: 'asc' }))
      for (const r of page) {
        if (!this.watch.stale(r.id, 'open', r.ttlMs)) continue;
        this.watch.forget(r.id);
        if (await this.store.transaction((tx) => closeReservation(tx, r.tenantId, r.callId, 'expired'))) expired++;
      }
    if (expired) {
      domainMetrics.reservationsExpired.inc(expired);
      this.logger.warn({ expired }, 'expired reservations that nothing settled or released');
    }
    return expired;
  }
}
