import type { identityV1 } from '@svc/proto';
import type { Checks } from './validate';

/** An API key's limits as stored (CONTRACT.md 8); an absent field is no limit. */
export interface KeyLimits {
  requestsPerMinute?: number;
  tokensPerMinute?: number;
  concurrency?: number;
  creditBudget?: { credits: number; period: 'total' | 'month' };
}

/** Inclusive bounds of each limit: wide enough for any real use, narrow enough to stay exact in int32 / int64. */
export const LIMIT_RANGES = {
  requestsPerMinute: [1, 1_000_000],
  tokensPerMinute: [1, 1_000_000_000],
  concurrency: [1, 10_000],
  credits: [1, 1_000_000_000_000],
} as const;

export const BUDGET_PERIODS = ['total', 'month'] as const;

type RateField = 'requestsPerMinute' | 'tokensPerMinute' | 'concurrency';
const RATE_FIELDS: RateField[] = ['requestsPerMinute', 'tokensPerMinute', 'concurrency'];

function checkNumber(c: Checks, field: string, value: number, [min, max]: readonly [number, number]): number {
  if (!Number.isInteger(value) || value < min || value > max) c.fail(field, `must be an integer from ${min} to ${max}`);
  return value;
}

function checkBudget(c: Checks, field: string, b: identityV1.ApiKeyCreditBudget): NonNullable<KeyLimits['creditBudget']> {
  return {
    credits: checkNumber(c, `${field}.credits`, b.credits, LIMIT_RANGES.credits),
    period: c.oneOf(`${field}.period`, b.period, BUDGET_PERIODS),
  };
}

/** The limits of a new key, checked (field names as the API spells them: `limits.concurrency`). */
export function checkLimits(c: Checks, limits: identityV1.ApiKeyLimits | undefined): KeyLimits {
  const out: KeyLimits = {};
  if (!limits) return out;
  for (const f of RATE_FIELDS) {
    const v = limits[f];
    if (v !== undefined) out[f] = checkNumber(c, `limits.${f}`, v, LIMIT_RANGES[f]);
  }
  if (limits.creditBudget) out.creditBudget = checkBudget(c, 'limits.creditBudget', limits.creditBudget);
  return out;
}

/** `current` with a PATCH's changes merged field by field: a value sets, `clear` removes, absent keeps. */
export function mergeLimits(c: Checks, current: KeyLimits, patch: identityV1.ApiKeyLimitsPatch | undefined): KeyLimits {
  const out: KeyLimits = { ...current };
  if (!patch) return out;
  for (const f of RATE_FIELDS) {
    const change = patch[f]?.change;
    if (!change) continue;
    if (change.$case === 'clear') delete out[f];
    else out[f] = checkNumber(c, `limits.${f}`, change.value, LIMIT_RANGES[f]);
  }
  const budget = patch.creditBudget?.change;
  if (budget?.$case === 'clear') delete out.creditBudget;
  else if (budget) out.creditBudget = checkBudget(c, 'limits.creditBudget', budget.value);
  return out;
}

export function toLimits(l: KeyLimits | undefined): identityV1.ApiKeyLimits {
  return l ? { ...l, creditBudget: l.creditBudget && { ...l.creditBudget } } : {};
}
