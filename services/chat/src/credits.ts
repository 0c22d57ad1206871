import type { AuthedContext } from '@svc/kit';
import type { ReplyLlm } from './replies';

/**
 * The one place a reply asks whether the tenant may spend: called after validation (llm_not_configured included),
 * before anything is stored, as CONTRACT.md 5 orders the checks. In the service it is the kit's CreditGate, which
 * throws AppError('INSUFFICIENT_CREDITS') (402) when the tenant has none left.
 */
export interface CreditCheck {
  assertSpendable(ctx: AuthedContext, llm: ReplyLlm): Promise<void>;
}
