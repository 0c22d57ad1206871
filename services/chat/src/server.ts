import {
  capCounters,
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
import { chatV1 } from '@svc/proto';
import { messages, responses, sessions } from './collections';
import { purgeExpiredResponses } from './purge';
import type { CreditCheck } from './credits';
import { chatHandlers } from './handlers';
import { grpcPeers, type Peers } from './peers';
import { Replies } from './replies';

const chatConfig = {
  projectsAddr: field('PROJECTS_ADDR', 'string', { default: '127.0.0.1:50052' }),
  agentsAddr: field('AGENTS_ADDR', 'string', { default: '127.0.0.1:50053' }),
  billingAddr: field('BILLING_ADDR', 'string', { default: '127.0.0.1:50056' }),
  maxTokens: llmMaxTokensField,
  flushMs: field('CHAT_FLUSH_MS', 'int', { default: '200', min: 10, max: 10_000 }),
  leaseMs: field('CHAT_REPLY_LEASE_MS', 'int', { default: '20000', min: 200, max: 600_000 }),
  drainMs: field('CHAT_DRAIN_MS', 'int', { default: '10000', min: 0, max: 600_000 }),
  pollMs: field('CHAT_POLL_MS', 'int', { default: '250', min: 10, max: 10_000 }),
  llmCacheMs: field('CHAT_LLM_SETTINGS_CACHE_MS', 'int', { default: '1000', min: 0, max: 60_000 }),
  tenantConcurrency: field('CHAT_TENANT_CONCURRENCY', 'int', { default: '16', min: 1, max: 10_000 }),
  followersPerTenant: field('CHAT_RUN_FOLLOWERS_PER_TENANT', 'int', { default: '8', min: 1, max: 10_000 }),
  followersPerKey: field('CHAT_RUN_FOLLOWERS_PER_KEY', 'int', { default: '4', min: 1, max: 10_000 }),
  maxSessionsPerTenant: field('CHAT_SESSIONS_PER_TENANT', 'int', { default: '10000', min: 1, max: 10_000_000 }),
  responsesRetentionHours: field('RESPONSES_RETENTION_HOURS', 'int', { default: '24', min: 1, max: 8760 }),
  /** A model's wait for its answer to start and then between chunks; past it the call moves to the next model. */
  llmTimeoutMs: field('CHAT_LLM_TIMEOUT_MS', 'int', { default: '60000', min: 100, max: 600_000 }),
  llmMaxRetries: field('CHAT_LLM_RETRIES', 'int', { default: '2', min: 0, max: 10 }),
  ...llmBreakerConfig,
  ...pricingConfig,
} as const;

export interface ChatOptions {
  /** Billing's reservations; default: the billing service at BILLING_ADDR. */
  credits?: CreditCheck;
  /** For tests of this service alone; the default asks identity, projects and agents over gRPC. */
  peers?: Peers;
}

export async function startChat(env: NodeJS.ProcessEnv = process.env, options: ChatOptions = {}): Promise<RunningService> {
  const rt = await openRuntime({
    name: 'chat',
    defaultPort: 50054,
    config: chatConfig,
    collections: [sessions, messages, responses, capCounters],
    env,
  });
  const { config } = rt;
  const pricing = { creditsPerUsd: config.creditsPerUsd, creditsPer1kTokens: config.creditsPer1kTokens };
  const { verifier, identity } = identityVerifier(config);
  const peers =
    options.peers ??
    grpcPeers(
      { identity: config.identityAddr, projects: config.projectsAddr, agents: config.agentsAddr },
      { deadlineMs: config.grpcDeadlineMs, llmCacheMs: config.llmCacheMs },
      identity,
    );
  // Provider calls go to an address a tenant chose: through the egress guard. Streams keep their own idle timeout.
  const transport = throughEgress(egressStream(egressPolicyFrom(config)));
  const replies = new Replies(
    rt.store,
    rt.relay,
    rt.logger,
    transport,
    {
      flushMs: config.flushMs,
      leaseMs: config.leaseMs,
      drainMs: config.drainMs,
    },
    {
      // Per process (docs/decisions.md): a deployment that keeps failing is skipped without an attempt.
      breaker: new CircuitBreaker({
        failures: config.llmBreakerFailures,
        windowMs: DEFAULT_BREAKER_WINDOW_MS,
        cooldownMs: config.llmBreakerCooldownS * 1000,
      }),
      timeoutMs: config.llmTimeoutMs,
      maxRetries: config.llmMaxRetries,
      pricing,
    },
  );
  await replies.startSweeping();
  // Every reply reserves its most possible cost in billing before it starts (contracts CreditReservations).
  const gate = options.credits ? null : new CreditReservations(config.billingAddr, config.grpcDeadlineMs);
  const credits: CreditCheck = options.credits ?? {
    reserve: async (ctx, hold) => void (await gate!.reserve(ctx.token, hold)),
    release: (ctx, callId) => gate!.release(ctx.token, callId),
  };
  // Responses past RESPONSES_RETENTION_HOURS are deleted (their session's messages stay with the session).
  const purger = setInterval(() => {
    purgeExpiredResponses(rt.store).catch((err: unknown) => rt.logger.warn({ err }, 'purging expired responses failed; will retry'));
  }, 60_000);
  purger.unref();
  const svc = await serve(rt, {
    verifier,
    healthNames: ['chat.v1.ChatService'],
    registrations: [
      registration({
        definition: chatV1.ChatServiceService,
        implementation: chatHandlers({
          store: rt.store,
          replies,
          peers,
          credits,
          pollMs: config.pollMs,
          tenantConcurrency: config.tenantConcurrency,
          followerLimits: { followers: config.followersPerTenant, followersPerKey: config.followersPerKey },
          maxSessionsPerTenant: config.maxSessionsPerTenant,
          defaultMaxTokens: config.maxTokens,
          pricing,
          responsesRetentionMs: config.responsesRetentionHours * 3_600_000,
        }),
      }),
    ],
    onStop: async () => {
      clearInterval(purger);
      peers.close();
      identity.close();
      gate?.close();
    },
  });
  return {
    ...svc,
    // Replies first (they finish, or are stored as failed), then the server (readers get their final event).
    stop: async () => {
      await replies.stop();
      await svc.stop();
    },
  };
}
