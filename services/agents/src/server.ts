import {
  capCounters,
  createClient,
  egressFetch,
  egressStream,
  egressPolicyFrom,
  openRuntime,
  registration,
  serve,
  type RunningService,
} from '@svc/kit';
import { CreditReservations, identityVerifier } from '@svc/contracts';
import { CircuitBreaker, DEFAULT_BREAKER_WINDOW_MS, throughEgress } from '@svc/llm';
import { agentsV1, projectsV1 } from '@svc/proto';
import { agents, mcpServers, runs } from './collections';
import { agentsConfig } from './config';
import type { CreditCheck } from './credits';
import { agentHandlers, mcpHandlers, runHandlers } from './handlers';
import { McpConnector } from './mcp-client';
import { RunWorker } from './worker';

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
