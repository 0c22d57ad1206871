import type { AuthedContext } from '@svc/kit';
import type { CallHold } from '@svc/contracts';

/**
 * Where a reply asks billing for credits (CONTRACT.md 8): after validation (llm_not_configured included), before
 * anything is stored, as CONTRACT.md 5 orders the checks. `reserve` holds the reply's most possible cost and throws
 * AppError('INSUFFICIENT_CREDITS') (402) when it does not fit in the tenant's available credits; the reply's
 * `llm.usage` event (carrying the reply id as the call id) settles it. In the service it is the kit's
 * CreditReservations.
 */
export interface CreditCheck {
  reserve(ctx: AuthedContext, hold: CallHold): Promise<void>;
  /** Gives back the hold of a reply that was never started (its message could not be stored). */
  release(ctx: AuthedContext, callId: string): Promise<void>;
}
