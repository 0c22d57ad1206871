import { field, llmBreakerConfig } from '@svc/kit';
import { llmMaxTokensField, pricingConfig } from '@svc/contracts';

/** Settings of the chat service beyond the common ones. */
export const chatConfig = {
  projectsAddr: field('PROJECTS_ADDR', 'string', { default: '127.0.0.1:50052' }),
  agentsAddr: field('AGENTS_ADDR', 'string', { default: '127.0.0.1:50053' }),
  billingAddr: field('BILLING_ADDR', 'string', { default: '127.0.0.1:50056' }),
  maxTokens: llmMaxTokensField,
  flushMs: field('CHAT_FLUSH_MS', 'int', { default: '200', min: 10, max: 10_000 }),
  leaseMs: field('CHAT_REPLY_LEASE_MS', 'int', { default: '20000', min: 200, max: 600_000 }),
  drainMs: field('CHAT_DRAIN_MS', 'int', { default: '10000', min: 0, max: 600_000 }),
  pollMs: field('CHAT_POLL_MS', 'int', { default: '250', min: 10, max: 10_000 }),
  /**
   * How the other chat processes reach this one (host:port of its gRPC server), recorded on every reply it
   * generates: a reader of that reply's stream on another process is relayed the reply live from here (owner-relay.ts)
   * instead of polling the store every CHAT_POLL_MS. Empty: readers elsewhere poll.
   */
  peerAddr: field('CHAT_PEER_ADDR', 'string', { default: '' }),
  llmCacheMs: field('CHAT_LLM_SETTINGS_CACHE_MS', 'int', { default: '1000', min: 0, max: 60_000 }),
  tenantConcurrency: field('CHAT_TENANT_CONCURRENCY', 'int', { default: '16', min: 1, max: 10_000 }),
  followersPerTenant: field('CHAT_RUN_FOLLOWERS_PER_TENANT', 'int', { default: '8', min: 1, max: 10_000 }),
  followersPerKey: field('CHAT_RUN_FOLLOWERS_PER_KEY', 'int', { default: '4', min: 1, max: 10_000 }),
  maxSessionsPerTenant: field('CHAT_SESSIONS_PER_TENANT', 'int', { default: '10000', min: 1, max: 10_000_000 }),
  responsesRetentionHours: field('RESPONSES_RETENTION_HOURS', 'int', { default: '24', min: 1, max: 8760 }),
  /** A model's wait for its answer to start and then between chunks; past it the call moves to the next model. */
  llmTimeoutMs: field('CHAT_LLM_TIMEOUT_MS', 'int', { default: '60000', min: 100, max: 600_000 }),
  llmMaxRetries: field('CHAT_LLM_RETRIES', 'int', { default: '2', min: 0, max: 10 }),
  /**
   * Calls carve their holds from a slice of the tenant's credits this process holds (billing's escrow), with no
   * round trip each, when the tenant's balance is large next to a call's hold and the caller's key has no credit
   * budget (escrow.ts); else, and when off, each call reserves in billing.
   */
  creditEscrow: field('CHAT_CREDIT_ESCROW', 'bool', { default: 'false' }),
  ...llmBreakerConfig,
  ...pricingConfig,
} as const;
