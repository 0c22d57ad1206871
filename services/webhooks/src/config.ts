import { ConfigError, field } from '@svc/kit';

/** Settings of the webhooks service beyond the common ones. */
export const webhooksConfig = {
  /** Seconds between attempts, fractions allowed (tests use `0.2,0.2`). */
  retrySchedule: field('WEBHOOK_RETRY_SCHEDULE', 'string', { default: '5,300,1800,7200,18000,36000,36000' }),
  /** A 2xx within this long is a success (CONTRACT.md 5: 10 s). */
  deliveryTimeoutMs: field('WEBHOOK_TIMEOUT_MS', 'int', { default: '10000', min: 100, max: 60_000 }),
  /** Deliveries in flight at once, across registrations (one at a time per registration). */
  concurrency: field('WEBHOOK_CONCURRENCY', 'int', { default: '64', min: 1, max: 1000 }),
  /** Registrations of one tenant delivered at once: one tenant's slow endpoints cannot hold every slot. */
  tenantConcurrency: field('WEBHOOK_TENANT_CONCURRENCY', 'int', { default: '8', min: 1, max: 1000 }),
  /** Registrations a tenant may keep (400 `too_many_webhooks` past it); fan-out reads every one of them. */
  maxWebhooksPerTenant: field('WEBHOOKS_PER_TENANT', 'int', { default: '100', min: 1, max: 100_000 }),
  /** Days the event log keeps an event (GET /events, recovery); older ones are gone at once and swept hourly. */
  eventsRetentionDays: field('EVENTS_RETENTION_DAYS', 'int', { default: '30', min: 1, max: 3650 }),
} as const;

/** `5,300,1800` -> [5000, 300000, 1800000] ms; an empty schedule means one attempt and no retry. */
export function parseRetrySchedule(raw: string): number[] {
  const parts = raw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const out = parts.map(Number);
  if (out.some((n) => !Number.isFinite(n) || n < 0 || n > 7 * 24 * 3600) || out.length > 50)
    throw new ConfigError([
      `WEBHOOK_RETRY_SCHEDULE must be a comma list of at most 50 seconds values (0 to 604800), got ${JSON.stringify(raw)}`,
    ]);
  return out.map((s) => Math.round(s * 1000));
}
