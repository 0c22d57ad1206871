import type { AuthedContext } from '@svc/kit';
import type { CallHold, CreditReservations } from '@svc/contracts';
import { holdCost } from '@svc/llm/pricing';
import type { CreditEscrow } from './escrow';

/** A hold carved from this process's escrow of the tenant's credits (escrow.ts), as the reply records it. */
export interface CarvedHold {
  escrowId: string;
  credits: number;
}

/**
 * Where a reply asks billing for credits (CONTRACT.md 8): after validation (llm_not_configured included), before
 * anything is stored, as CONTRACT.md 5 orders the checks. `reserve` holds the reply's most possible cost and throws
 * AppError('INSUFFICIENT_CREDITS') (402) when it does not fit in the tenant's available credits; the reply's
 * `llm.usage` event (carrying the reply id as the call id) settles it. In the service it is the kit's
 * CreditReservations, or (CHAT_CREDIT_ESCROW) a hold carved from this process's escrow when `mayEscrow` and the
 * caller's key has no credit budget: then it answers the carved hold, which the reply records.
 */
export interface CreditCheck {
  reserve(ctx: AuthedContext, hold: CallHold, options?: { mayEscrow?: boolean }): Promise<CarvedHold | void>;
  /** Gives back the hold of a reply that was never started (its message could not be stored). */
  release(ctx: AuthedContext, callId: string, carved?: CarvedHold): Promise<void>;
}

/**
 * The service's CreditCheck: billing's reservations, or with an escrow (CHAT_CREDIT_ESCROW) a hold carved from it
 * when the reply may use one and the caller's key has no credit budget (billing checks a budget in the reservation's
 * transaction, decision 61). The key's limits are identity's answer, kept (at most half a second) as billing keeps them.
 */
export function creditCheck(options: {
  gate: CreditReservations;
  escrow: CreditEscrow | null;
  keyLimits: (token: string, tenantId: string, keyId: string) => Promise<{ creditBudget?: unknown } | undefined>;
  creditsPer1kTokens: number;
}): CreditCheck {
  const { gate, escrow, keyLimits } = options;
  const mayEscrow = async (ctx: AuthedContext) => {
    if (ctx.auth.typ !== 'api_key') return true;
    // Identity not answering: reserved per call, where billing decides.
    const limits = await keyLimits(ctx.token, ctx.auth.tid, ctx.auth.sid).catch(() => undefined);
    return Boolean(limits) && !limits!.creditBudget;
  };
  return {
    reserve: async (ctx, hold, opts) => {
      if (escrow && opts?.mayEscrow && (await mayEscrow(ctx))) {
        const held = holdCost(hold, options.creditsPer1kTokens);
        const escrowId = await escrow.carve(ctx.auth.tid, ctx.token, hold.callId, held);
        if (escrowId) return { escrowId, credits: held };
      }
      await gate.reserve(ctx.token, hold);
    },
    release: async (ctx, callId, carved) => {
      if (carved) escrow?.ended(carved.escrowId, callId, 0);
      else await gate.release(ctx.token, callId);
    },
  };
}
