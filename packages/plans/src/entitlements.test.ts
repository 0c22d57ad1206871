import {
  checkFeature,
  FEATURE_KEYS,
  featuresOf,
  hasFeature,
  isFeatureKey,
  isPlan,
  limitsOf,
  PLANS,
  planAtLeast,
  requiredPlan,
  type FeatureKey,
  type Plan,
} from './entitlements';

// The contract's table (CONTRACT.md 5), written out by hand so that a change to the code is a visible change here.
const EXPECTED: Record<FeatureKey, Record<Plan, boolean>> = {
  agents: { free: true, starter: true, growth: true, enterprise: true },
  chat: { free: true, starter: true, growth: true, enterprise: true },
  webhooks: { free: true, starter: true, growth: true, enterprise: true },
  ip_allowlist: { free: true, starter: true, growth: true, enterprise: true },
  byos_storage: { free: true, starter: true, growth: true, enterprise: true },
  data_residency: { free: true, starter: true, growth: true, enterprise: true },
  secondary_region: { free: false, starter: false, growth: true, enterprise: true },
  sso: { free: false, starter: false, growth: false, enterprise: true },
};

it('lists the plans in order and exactly the contract’s feature keys', () => {
  expect(PLANS).toEqual(['free', 'starter', 'growth', 'enterprise']);
  expect([...FEATURE_KEYS].sort()).toEqual(Object.keys(EXPECTED).sort());
});

describe.each(PLANS)('plan %s', (plan) => {
  it.each(Object.keys(EXPECTED) as FeatureKey[])('feature %s', (key) => {
    expect(hasFeature(plan, key)).toBe(EXPECTED[key][plan]);
    expect(checkFeature(plan, key)).toEqual({ featureKey: key, enabled: EXPECTED[key][plan], plan, requiredPlan: requiredPlan(key) });
  });
  it('has the features of every lower plan, and its limits', () => {
    for (const lower of PLANS.slice(0, PLANS.indexOf(plan))) expect(featuresOf(plan)).toEqual(expect.arrayContaining(featuresOf(lower)));
    expect(limitsOf(plan).includedCredits).toBe(1000);
    expect(limitsOf(plan).maxRegions).toBe(hasFeature(plan, 'secondary_region') ? 2 : 1);
  });
});

it('names the lowest plan of each feature', () => {
  for (const key of FEATURE_KEYS) {
    const lowest = PLANS.find((p) => EXPECTED[key][p]);
    expect(requiredPlan(key)).toBe(lowest);
  }
  expect(requiredPlan('secondary_region')).toBe('growth');
  expect(requiredPlan('sso')).toBe('enterprise');
});

it('orders plans', () => {
  expect(planAtLeast('growth', 'starter')).toBe(true);
  expect(planAtLeast('starter', 'growth')).toBe(false);
  expect(planAtLeast('free', 'free')).toBe(true);
  expect(planAtLeast('enterprise', 'growth')).toBe(true);
});

it('recognises plans and keys, and nothing inherited', () => {
  expect(isPlan('growth')).toBe(true);
  expect(isPlan('platinum')).toBe(false);
  expect(isFeatureKey('sso')).toBe(true);
  for (const bad of ['constructor', '__proto__', 'toString', 'SSO', '', 42, null]) expect(isFeatureKey(bad)).toBe(false);
});
