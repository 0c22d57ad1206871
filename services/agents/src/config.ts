import { field, llmBreakerConfig } from '@svc/kit';
import { llmMaxTokensField, pricingConfig } from '@svc/contracts';

/** Settings of the agents service beyond the common ones. */
export const agentsConfig = {
  projectsAddr: field('PROJECTS_ADDR', 'string', { default: '127.0.0.1:50052' }),
  billingAddr: field('BILLING_ADDR', 'string', { default: '127.0.0.1:50056' }),
  maxTokens: llmMaxTokensField,
  maxAgentsPerTenant: field('AGENTS_PER_TENANT', 'int', { default: '1000', min: 1, max: 1_000_000 }),
  /**
   * Optional: stable across restarts and unique among live workers (never the host name alone, which replicas on
   * one host share): a restarted worker takes back at once the runs claimed under it.
   */
  workerId: field('AGENTS_WORKER_ID', 'string'),
  workerConcurrency: field('AGENTS_WORKER_CONCURRENCY', 'int', { default: '4', min: 1, max: 64 }),
  tenantConcurrency: field('AGENTS_TENANT_CONCURRENCY', 'int', { default: '2', min: 1, max: 1000 }),
  pollMs: field('AGENTS_POLL_MS', 'int', { default: '2000', min: 10, max: 60_000 }),
  leaseMs: field('AGENTS_LEASE_MS', 'int', { default: '30000', min: 300, max: 600_000 }),
  maxAttempts: field('AGENTS_MAX_ATTEMPTS', 'int', { default: '3', min: 1, max: 100 }),
  llmTimeoutMs: field('AGENTS_LLM_TIMEOUT_MS', 'int', { default: '60000', min: 100 }),
  llmMaxRetries: field('AGENTS_LLM_RETRIES', 'int', { default: '2', min: 0, max: 10 }),
  stepRetries: field('AGENTS_STEP_RETRIES', 'int', { default: '1', min: 0, max: 10 }),
  retryBaseMs: field('AGENTS_RETRY_BASE_MS', 'int', { default: '1000', min: 0, max: 60_000 }),
  /** One MCP operation (connect and list, or connect and call a tool): past it the step fails, not the run's worker. */
  mcpCallTimeoutS: field('MCP_CALL_TIMEOUT_S', 'int', { default: '30', min: 1, max: 600 }),
  /** An MCP server's answer larger than this fails the call; a result kept on a step is cut at 16,000 characters. */
  mcpMaxResponseBytes: field('MCP_MAX_RESPONSE_BYTES', 'int', { default: String(1024 * 1024), min: 1024, max: 64 * 1024 * 1024 }),
  maxMcpServersPerTenant: field('MCP_SERVERS_PER_TENANT', 'int', { default: '20', min: 1, max: 10_000 }),
  ...llmBreakerConfig,
  ...pricingConfig,
} as const;
