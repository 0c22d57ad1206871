import { field } from '@svc/kit';

/** Settings of the billing service beyond the common ones. */
export const billingConfig = {
  /** Credits per 1,000 tokens (input + output) of one model call, rounded up per call (CONTRACT.md 5). */
  creditsPer1kTokens: field('CREDITS_PER_1K_TOKENS', 'int', { default: '1', min: 0, max: 1_000_000 }),
  /** Credits granted to a new tenant (from `tenant.created`). */
  startingGrant: field('BILLING_STARTING_GRANT', 'int', { default: '1000', min: 0, max: 1_000_000_000 }),
  /** The operator token; the admin API is off (404 at the gateway, refused here) when unset. */
  adminToken: field('SVC_ADMIN_TOKEN', 'string', { secret: true }),
  /** Where the sandbox portal points (the web page /settings/billing); default http://HOST:PORT as the gateway's. */
  publicUrl: field('PUBLIC_URL', 'url'),
  /** The gateway's listener, for the default public address (as the gateway computes it). */
  gatewayHost: field('HOST', 'string', { default: '127.0.0.1' }),
  gatewayPort: field('PORT', 'int', { default: '8080', min: 0, max: 65535 }),
  /** Price of one credit in cents when bought. */
  creditPriceCents: field('BILLING_CREDIT_PRICE_CENTS', 'int', { default: '1', min: 0, max: 100_000 }),
} as const;
