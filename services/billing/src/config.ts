import { field } from '@svc/kit';
import { pricingConfig } from '@svc/contracts';

/** Settings of the billing service beyond the common ones. */
export const billingConfig = {
  /** Credits per 1,000 tokens (input + output) of one model call, rounded up per call (CONTRACT.md 5). */
  creditsPer1kTokens: pricingConfig.creditsPer1kTokens,
  /**
   * How long a model call's reservation holds its credits when nothing settles or releases it (its caller died and
   * recorded nothing): billing's sweep then gives it back, judged on its own clock.
   */
  reservationTtlMs: field('BILLING_RESERVATION_TTL_MS', 'int', { default: '600000', min: 1000, max: 86_400_000 }),
  /**
   * A chat process's lease on an escrow of credits (escrows.ts): it renews it every third of this, and billing gives
   * an escrow nobody renews back after this plus the reservation TTL.
   */
  escrowLeaseMs: field('BILLING_ESCROW_LEASE_MS', 'int', { default: '5000', min: 500, max: 600_000 }),
  /** The largest escrow granted (a tenant's slice is also at most an eighth of its available credits). */
  escrowMaxCredits: field('BILLING_ESCROW_MAX_CREDITS', 'int', { default: '100000', min: 1, max: 1_000_000_000 }),
  /** How long the request log (GET /requests) keeps a model call's entry. */
  requestLogRetentionDays: field('REQUEST_LOG_RETENTION_DAYS', 'int', { default: '30', min: 1, max: 3650 }),
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
  /** Stripe's secret API key: set, payments go through Stripe Checkout instead of the sandbox. */
  stripeSecretKey: field('STRIPE_SECRET_KEY', 'string', { secret: true }),
  /** The signing secret of the Stripe webhook endpoint (POST /api/v1/billing/webhooks/stripe). */
  stripeWebhookSecret: field('STRIPE_WEBHOOK_SECRET', 'string', { secret: true }),
  /** Stripe's API address (default https://api.stripe.com): a proxy, or a local server in tests. */
  stripeApiUrl: field('STRIPE_API_URL', 'url'),
} as const;
