import type { AuthedContext } from '@svc/kit';
import type { CallHold } from '@svc/contracts';

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
