/**
 * An API key's credit budget (CONTRACT.md 8): a model call of the key is accepted only when its reservation fits in
 * what is left of the budget, `credits - spent this period - the key's open reservations`. Spent and reserved live
 * on the key's usage document (key-usage.ts), which the reservation's transaction reads and moves: every reservation
 * of the key, and every settle of one (which moves spent and reserved together), serialises on that document, so no
 * number of replicas lets a key reserve past its budget.
 *
 * The budget itself is identity's (GetCallerKeyLimits, read per reservation), so a PATCH counts from its commit on
 * every replica, for background work holding an older delegated token of the key as well. `period: "month"` is the
 * calendar month in UTC of billing's clock at the reservation (the same clock that files each settle's credits under
 * a month): one machine decides, nothing compares clocks across machines.
 *
 * A revoked key's work already under way (an agent run holding a delegated token of the key) still reserves, and
 * identity answers no limits for a revoked key: billing keeps the budget each reservation read on the key's usage
 * document, and a key identity no longer knows reserves under the budget it last had (issue 31).
 */
import { AppError, type StoreSession } from '@svc/kit';
import type { Store } from '@svc/kit';
import { keyUsage, keyUsageId, keyUsageOf, monthOf, type KeyUsageDoc } from './key-usage';

export interface KeyBudget {
  /** The API key's id. */
  keyId: string;
  credits: number;
  period: 'total' | 'month';
}

/** Spent in the budget's period, on the key's usage document, as of `now` (billing's clock). */
export function spentIn(doc: KeyUsageDoc, period: KeyBudget['period'], now: number): number {
  if (period === 'total') return doc.totalCredits;
  return doc.month === monthOf(now) ? doc.monthCredits : 0;
}

/**
 * Holds `credits` of the key's budget in the caller's (reservation's) transaction, or refuses with 402
 * INSUFFICIENT_CREDITS, reason `key_budget_exhausted`, when they (at least 1) exceed what is left.
 */
export async function holdKeyBudget(
  tx: StoreSession,
  tenantId: string,
  budget: KeyBudget,
  credits: number,
  now = Date.now(),
): Promise<void> {
  const doc = await keyUsageOf(tx, tenantId, budget.keyId, now);
  const spent = spentIn(doc, budget.period, now);
  const reserved = doc.reserved ?? 0;
  const required = Math.max(1, credits);
  if (budget.credits - spent - reserved < required)
    throw new AppError('INSUFFICIENT_CREDITS', "Not enough left of this API key's credit budget for this call", {
      reason: 'key_budget_exhausted',
      apiKeyId: budget.keyId,
      budget: budget.credits,
      period: budget.period,
      spent,
      reserved,
      required,
    });
  await tx.collection(keyUsage).increment(doc.id, { tenantId }, { reserved: credits });
  // Remembered for the key's work after a revocation; written only when it changed.
  if (!doc.hasBudget || doc.budget?.credits !== budget.credits || doc.budget?.period !== budget.period)
    await tx
      .collection(keyUsage)
      .update(doc.id, { tenantId }, { budget: { credits: budget.credits, period: budget.period }, hasBudget: true });
}

/** The budget the key had at its last reservation with one, for a key identity no longer answers for (revoked). */
export async function lastKeyBudget(store: Store, tenantId: string, keyId: string): Promise<KeyBudget | undefined> {
  const doc = await store.collection(keyUsage).get(keyUsageId(tenantId, keyId), { tenantId });
  return doc?.hasBudget && doc.budget ? { keyId, credits: doc.budget.credits, period: doc.budget.period } : undefined;
}

/** The key has no budget now (identity says so): a later revocation must not bring back the one it had. */
export async function forgetKeyBudget(store: Store, tenantId: string, keyId: string): Promise<void> {
  // Read first: a write that matches nothing still takes SQLite's writer; in the steady state nothing is written.
  const id = keyUsageId(tenantId, keyId);
  const col = store.collection(keyUsage);
  if (await col.get(id, { tenantId, hasBudget: true })) await col.update(id, { tenantId, hasBudget: true }, { hasBudget: false });
}
