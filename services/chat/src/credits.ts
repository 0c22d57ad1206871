import type { AuthedContext } from '@svc/kit';
import type { ReplyLlm } from './replies';

/**
 * The one place a reply asks whether the tenant may spend: called after validation (llm_not_configured included),
 * before anything is stored, as CONTRACT.md 5 orders the checks. Billing (a later issue) plugs in here and throws
 * AppError('INSUFFICIENT_CREDITS') (402) when the tenant has none left. Until then every reply may go ahead.
 */
export interface CreditCheck {
  assertSpendable(ctx: AuthedContext, llm: ReplyLlm): Promise<void>;
}

export const noCreditCheck: CreditCheck = { assertSpendable: async () => undefined };
