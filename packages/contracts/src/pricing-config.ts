import { field } from '@svc/kit';
import { DEFAULT_LLM_MAX_TOKENS } from './credits';

/**
 * The settings every service that prices a model call reads (CONTRACT.md 12): identity shows each catalogue entry's
 * effective price, chat and agents resolve the price of the model that serves a call for its hold and its bill.
 */
export const pricingConfig = {
  creditsPerUsd: field('CREDITS_PER_USD', 'int', { default: '1000', min: 0, max: 1_000_000_000 }),
  creditsPer1kTokens: field('CREDITS_PER_1K_TOKENS', 'int', { default: '1', min: 0, max: 1_000_000 }),
} as const;

/** LLM_MAX_TOKENS: a model call's output bound when neither the tenant nor the request set one (its hold counts it). */
export const llmMaxTokensField = field('LLM_MAX_TOKENS', 'int', { default: String(DEFAULT_LLM_MAX_TOKENS), min: 1, max: 200_000 });
