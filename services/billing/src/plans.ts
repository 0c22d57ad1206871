import type { Plan } from '@svc/plans';

/**
 * What billing charges for each plan of the entitlements table (@svc/plans), per month. The table says what a plan
 * has; the price is billing's own.
 */
export const MONTHLY_PRICE_CENTS: Record<Plan, number> = { free: 0, starter: 2_900, growth: 9_900, enterprise: 49_900 };
