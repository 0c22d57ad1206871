/**
 * The one place a run asks whether the tenant may spend on the LLM: at execute (a refusal answers 402
 * INSUFFICIENT_CREDITS, after validation and llm_not_configured, as CONTRACT.md 5 orders the checks) and before each
 * model call of a run (a refusal fails the run with a reason). In the service it is the kit's CreditGate (billing's
 * balance, kept per tenant for CREDITS_CACHE_MS); billing consumes the `llm.usage` events this service publishes.
 */
export interface CreditCheck {
  /** Throws an AppError INSUFFICIENT_CREDITS when the tenant has nothing left to spend. */
  assertSpendable(tenantId: string, token: string): Promise<void>;
}

export const noCreditLimit: CreditCheck = {
  async assertSpendable() {},
};
