import {
  capCounters,
  createClient,
  egressFetch,
  egressStream,
  egressPolicyFrom,
  field,
  llmBreakerConfig,
  openRuntime,
  registration,
  serve,
  type RunningService,
} from '@svc/kit';
import { CreditReservations, identityVerifier, llmMaxTokensField, pricingConfig } from '@svc/contracts';
import { CircuitBreaker, DEFAULT_BREAKER_WINDOW_MS, throughEgress } from '@svc/llm';
import { agentsV1, projectsV1 } from '@svc/proto';
import { agentHandlers } from './agent-handlers';
import { agents, mcpServers, runs } from './collections';
import { McpConnector } from './mcp-client';
import { mcpHandlers } from './mcp-handlers';
import type { CreditCheck } from './credits';
import { runHandlers } from './run-handlers';
import { RunWorker } from './worker';

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

export async function startAgents(env: NodeJS.ProcessEnv = process.env, options: { credits?: CreditCheck } = {}): Promise<RunningService> {
  const rt = await openRuntime({
    name: 'agents',
    defaultPort: 50053,
    config: agentsConfig,
    collections: [agents, runs, mcpServers, capCounters],
    env,
  });
  const c = rt.config;
  const { verifier, identity } = identityVerifier(c);
  const pricing = { creditsPerUsd: c.creditsPerUsd, creditsPer1kTokens: c.creditsPer1kTokens };
  const projects = createClient(projectsV1.ProjectsServiceService, c.projectsAddr, { deadlineMs: c.grpcDeadlineMs });
  // Every model call reserves its most possible cost in billing before it starts (contracts CreditReservations).
  const gate = options.credits ? null : new CreditReservations(c.billingAddr, c.grpcDeadlineMs);
  const credits: CreditCheck = options.credits ?? gate!;
  const policy = egressPolicyFrom(c);
  const connector = new McpConnector(egressFetch({ ...policy, maxResponseBytes: c.mcpMaxResponseBytes }));
  const mcpTimeoutMs = c.mcpCallTimeoutS * 1000;
  const worker = new RunWorker(
    rt.store,
    rt.relay,
    rt.logger,
    {
      identity,
      projects,
      box: rt.box,
      llmTransport: throughEgress(egressStream({ ...egressPolicyFrom(c), maxResponseBytes: 32 * 1024 * 1024 })),
      credits,
      defaultMaxTokens: c.maxTokens,
      logger: rt.logger,
      llmTimeoutMs: c.llmTimeoutMs,
      llmMaxRetries: c.llmMaxRetries,
      // Per process (docs/decisions.md): a deployment that keeps failing is skipped without an attempt.
      breaker: new CircuitBreaker({
        failures: c.llmBreakerFailures,
        windowMs: DEFAULT_BREAKER_WINDOW_MS,
        cooldownMs: c.llmBreakerCooldownS * 1000,
      }),
      stepRetries: c.stepRetries,
      retryBaseMs: c.retryBaseMs,
      mcp: { store: rt.store, identity, connector, callTimeoutMs: mcpTimeoutMs, maxResultChars: 16_000 },
      pricing,
    },
    {
      workerId: c.workerId,
      concurrency: c.workerConcurrency,
      tenantConcurrency: c.tenantConcurrency,
      pollMs: c.pollMs,
      leaseMs: c.leaseMs,
      maxAttempts: c.maxAttempts,
    },
  );
  const runApi = runHandlers({
    store: rt.store,
    relay: rt.relay,
    box: rt.box,
    identity,
    projects,
    credits,
    worker,
    defaultMaxTokens: c.maxTokens,
    pricing,
  });
  const { endRunsOf, ...runRpcs } = runApi;
  const svc = await serve(rt, {
    verifier,
    healthNames: ['agents.v1.AgentsService'],
    registrations: [
      registration({
        definition: agentsV1.AgentsServiceService,
        implementation: {
          ...agentHandlers(rt.store, endRunsOf, rt.config.maxAgentsPerTenant),
          ...runRpcs,
          ...mcpHandlers({
            store: rt.store,
            identity,
            connector,
            policy,
            timeoutMs: mcpTimeoutMs,
            maxPerTenant: c.maxMcpServersPerTenant,
          }),
        },
      }),
    ],
    onStop: async () => {
      await worker.stop();
      projects.close();
      identity.close();
      gate?.close();
    },
  });
  worker.start();
  rt.logger.info({ worker: worker.owner }, 'run worker started');
  return svc;
}
