import type { CallHold } from '@svc/contracts';

/**
 * Where a run asks billing for credits (CONTRACT.md 8): at execute, the first model call's reservation (a refusal
 * answers 402 INSUFFICIENT_CREDITS, after validation and llm_not_configured, as CONTRACT.md 5 orders the checks), and
 * before each later model call (a refusal fails the run with a reason). The call's `llm.usage` event (this service
 * publishes it with the call id) settles the reservation. In the service it is the contracts package's CreditReservations.
 */
export interface CreditCheck {
  /** Holds the call's most possible cost; throws AppError INSUFFICIENT_CREDITS when it does not fit. */
  reserve(token: string, hold: CallHold): Promise<{ status: string }>;
  /** Gives back the hold of a call that was never started. */
  release(token: string, callId: string): Promise<void>;
}

export const noCreditLimit: CreditCheck = {
  async reserve() {
    return { status: 'open' };
  },
  async release() {},
};
