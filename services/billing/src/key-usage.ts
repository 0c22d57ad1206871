/**
 * Model usage per API key (CONTRACT.md 8): tokens in the current fixed 60 s window (a key's tokensPerMinute), and
 * credits in the current UTC month and in total (a key's creditBudget, the key view's usage). One document per key,
 * moved in the transaction that applies the usage entry (tally.ts: once for all the calls of a batch), so it counts
 * each llm.usage event once. Windows are on
 * billing's clock only: the same clock stamps the counts and answers what "this minute" is.
 */
import { errors, nowIso, type CallContext, type CollectionDef, type Store, type StoreSession } from '@svc/kit';
import { authed } from '@svc/contracts';
import type { billingV1 } from '@svc/proto';

export interface KeyUsageDoc {
  /** `tenant|key` (keyUsageId): a key id reported under another tenant can never meet this tenant's document. */
  id: string;
  tenantId: string;
  /** Start of the minute window `minuteTokens` counts, in epoch seconds. */
  minute: number;
  minuteTokens: number;
  /** The UTC month `monthCredits` counts: `YYYY-MM`. */
  month: string;
  monthCredits: number;
  totalCredits: number;
  /** Credits of the key's open reservations (absent: none yet), moved with each one's opening and closing (key-budget.ts). */
  reserved?: number;
  /**
   * The key's credit budget as last read from identity at a reservation (key-budget.ts), and whether it still has
   * one: a revoked key's work reserves under it, identity answering nothing for a revoked key.
   */
  budget?: { credits: number; period: 'total' | 'month' };
  hasBudget?: boolean;
  createdAt: string;
}

export const keyUsage: CollectionDef<KeyUsageDoc> = { name: 'key_usage' };

export const keyUsageId = (tenantId: string, keyId: string) => `${tenantId}|${keyId}`;

const MAX_IDS = 100;
export const minuteOf = (ms: number) => Math.floor(ms / 60_000) * 60;
export const monthOf = (ms: number) => new Date(ms).toISOString().slice(0, 7);

/** A key's usage document with zero counts, its windows those of `now`. */
export function newKeyUsage(tenantId: string, keyId: string, now: number): KeyUsageDoc {
  return {
    id: keyUsageId(tenantId, keyId),
    tenantId,
    minute: minuteOf(now),
    minuteTokens: 0,
    month: monthOf(now),
    monthCredits: 0,
    totalCredits: 0,
    reserved: 0,
    createdAt: nowIso(),
  };
}

/** The key's usage document in the caller's transaction, created with zero counts on the key's first use. */
export async function keyUsageOf(tx: StoreSession, tenantId: string, keyId: string, now = Date.now()): Promise<KeyUsageDoc> {
  const col = tx.collection(keyUsage);
  return (await col.get(keyUsageId(tenantId, keyId), { tenantId })) ?? (await col.insert(newKeyUsage(tenantId, keyId, now)));
}

export function keyUsageHandlers(store: Store, now: () => number = Date.now) {
  return {
    /** A key reads its own usage (the gateway's tokensPerMinute check); a manager's session reads any of its tenant. */
    async getKeyUsage(req: billingV1.GetKeyUsageRequest, ctx: CallContext): Promise<billingV1.GetKeyUsageResponse> {
      const { auth } = authed(ctx);
      if (req.apiKeyIds.length > MAX_IDS) throw errors.validation([{ field: 'apiKeyIds', message: `at most ${MAX_IDS}` }]);
      const manager = auth.typ !== 'api_key' && auth.scp === undefined && (auth.role === 'owner' || auth.role === 'admin');
      if (!manager && req.apiKeyIds.some((id) => id !== auth.sid))
        throw errors.forbidden("Only an owner's or admin's session reads other keys' usage", { reason: 'user_session_required' });
      const at = now();
      const minute = minuteOf(at);
      const month = monthOf(at);
      const col = store.collection(keyUsage);
      const usages = await Promise.all(
        req.apiKeyIds.map(async (id): Promise<billingV1.KeyUsage> => {
          const doc = await col.get(keyUsageId(auth.tid, id), { tenantId: auth.tid });
          return {
            apiKeyId: id,
            tokensThisMinute: doc && doc.minute === minute ? doc.minuteTokens : 0,
            creditsThisMonth: doc && doc.month === month ? doc.monthCredits : 0,
            creditsTotal: doc?.totalCredits ?? 0,
          };
        }),
      );
      return { usages, minuteResetsInS: Math.max(1, minute + 60 - Math.floor(at / 1000)) };
    },
  };
}
