/**
 * The one entitlements table (CONTRACT.md 5): every plan in order, the features it has and its limits. Billing,
 * regions and anything else that gates on plan read it here; nothing else decides what a plan allows.
 */

/** Plans from lowest to highest: a plan has every feature of the plans before it. */
export const PLANS = ['free', 'starter', 'growth', 'enterprise'] as const;
export type Plan = (typeof PLANS)[number];

/** Feature keys and the lowest plan that has each. */
export const FEATURES = {
  agents: 'free',
  chat: 'free',
  webhooks: 'free',
  ip_allowlist: 'free',
  byos_storage: 'free',
  data_residency: 'free',
  secondary_region: 'growth',
  sso: 'enterprise',
} as const satisfies Record<string, Plan>;
export type FeatureKey = keyof typeof FEATURES;
export const FEATURE_KEYS = Object.keys(FEATURES) as FeatureKey[];

export interface PlanLimits {
  /** Credits granted when a tenant starts on this plan (CONTRACT.md 5: 1,000 for a new tenant). */
  includedCredits: number;
  /** Regions a tenant may use at once: the primary, plus a failover where `secondary_region` is included. */
  maxRegions: number;
}

export const LIMITS: Record<Plan, PlanLimits> = {
  free: { includedCredits: 1_000, maxRegions: 1 },
  starter: { includedCredits: 1_000, maxRegions: 1 },
  growth: { includedCredits: 1_000, maxRegions: 2 },
  enterprise: { includedCredits: 1_000, maxRegions: 2 },
};

export function isPlan(value: unknown): value is Plan {
  return typeof value === 'string' && (PLANS as readonly string[]).includes(value);
}

export function isFeatureKey(value: unknown): value is FeatureKey {
  return typeof value === 'string' && Object.prototype.hasOwnProperty.call(FEATURES, value);
}

/** Position of a plan in the order; higher is more. */
export function planRank(plan: Plan): number {
  return PLANS.indexOf(plan);
}

/** True when `plan` is `minimum` or above. */
export function planAtLeast(plan: Plan, minimum: Plan): boolean {
  return planRank(plan) >= planRank(minimum);
}

/** The lowest plan that has the feature. */
export function requiredPlan(key: FeatureKey): Plan {
  return FEATURES[key];
}

export function hasFeature(plan: Plan, key: FeatureKey): boolean {
  return planAtLeast(plan, requiredPlan(key));
}

/** Every feature a plan has, in table order. */
export function featuresOf(plan: Plan): FeatureKey[] {
  return FEATURE_KEYS.filter((key) => hasFeature(plan, key));
}

export function limitsOf(plan: Plan): PlanLimits {
  return LIMITS[plan];
}

/** The answer of a feature check (spec 4.5): `{featureKey, enabled, plan, requiredPlan}`. */
export function checkFeature(plan: Plan, key: FeatureKey): { featureKey: FeatureKey; enabled: boolean; plan: Plan; requiredPlan: Plan } {
  return { featureKey: key, enabled: hasFeature(plan, key), plan, requiredPlan: requiredPlan(key) };
}
