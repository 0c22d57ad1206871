import { llmMaxTokensField, pricingConfig, requireVerifiedEmailField } from '@svc/contracts';
import { commonConfig, field, loadConfig, type ConfigOf } from '@svc/kit';

export const gatewaySpec = {
  ...commonConfig,
  port: field('PORT', 'int', { default: '8080', min: 0, max: 65535 }),
  httpHost: field('HOST', 'string', { default: '127.0.0.1' }),
  publicUrl: field('PUBLIC_URL', 'url'),
  trustProxy: field('TRUST_PROXY', 'list'),
  rateLimitMax: field('RATE_LIMIT_MAX', 'int', { default: '1000', min: 1 }),
  rateLimitWindowS: field('RATE_LIMIT_WINDOW_S', 'int', { default: '60', min: 1 }),
  adminToken: field('SVC_ADMIN_TOKEN', 'string', { secret: true }),
  /** How often the credential cache asks identity for revocations (Redis pub/sub makes it immediate). */
  revocationPollMs: field('REVOCATION_POLL_MS', 'int', { default: '500', min: 50, max: 1000 }),
  /** How often the project cache reads projects' change feed while its notice stream is down. */
  feedPollMs: field('FEED_POLL_MS', 'int', { default: '500', min: 50, max: 1000 }),
  /** Entries per read of a feed (revocations, project changes): smaller pages mean smaller answers, more reads. */
  feedPageSize: field('FEED_PAGE_SIZE', 'int', { default: '1000', min: 1, max: 1000 }),
  instanceId: field('INSTANCE_ID', 'string'),
  region: field('REGION', 'string', { default: 'us-east' }),
  /** Comment line sent on idle server-sent event streams (chat replies) so proxies keep them open. */
  sseKeepAliveMs: field('SSE_KEEPALIVE_MS', 'int', { default: '15000', min: 10, max: 300_000 }),
  /** Reply streams one tenant may hold open on one gateway (each holds a socket and a gRPC stream). */
  sseStreamsPerTenant: field('SSE_STREAMS_PER_TENANT', 'int', { default: '64', min: 1, max: 100_000 }),
  /** /v1/passthrough: largest request body forwarded, largest response passed back, wait for the provider. */
  passthroughMaxRequestBytes: field('PASSTHROUGH_MAX_REQUEST_BYTES', 'int', {
    default: String(1024 * 1024),
    min: 1024,
    max: 100 * 1024 * 1024,
  }),
  passthroughMaxResponseBytes: field('PASSTHROUGH_MAX_RESPONSE_BYTES', 'int', {
    default: String(10 * 1024 * 1024),
    min: 1024,
    max: 1024 * 1024 * 1024,
  }),
  passthroughTimeoutMs: field('PASSTHROUGH_TIMEOUT_MS', 'int', { default: '60000', min: 100, max: 600_000 }),
  /** A pass-through call's output bound when its body has none and the tenant set none (as chat's and agents'). */
  llmMaxTokens: llmMaxTokensField,
  /** Prices of pass-through calls (CONTRACT.md 12): the platform price list in USD times CREDITS_PER_USD, else flat. */
  ...pricingConfig,
  /** Model calls of users who have not verified their email are refused (plugins/verified-email.ts). */
  requireVerifiedEmail: requireVerifiedEmailField,
} as const;

export type GatewayConfig = ConfigOf<typeof gatewaySpec> & { publicUrl: string };

export function loadGatewayConfig(env: NodeJS.ProcessEnv = process.env): GatewayConfig {
  const c = loadConfig(gatewaySpec, env);
  return { ...c, publicUrl: c.publicUrl ?? `http://${c.httpHost}:${c.port}` };
}
