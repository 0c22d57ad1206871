import { capCounters, egressFetch, egressPolicyFrom, openRuntime, registration, serve, type RunningService } from '@svc/kit';
import { CreditReservations, identityVerifier } from '@svc/contracts';
import { CircuitBreaker, DEFAULT_BREAKER_WINDOW_MS, throughEgress } from '@svc/llm';
import { chatV1 } from '@svc/proto';
import { messages, responses, sessions } from './collections';
import { chatConfig } from './config';
import { purgeExpiredResponses } from './purge';
import type { CreditCheck } from './credits';
import { chatHandlers } from './handlers';
import { grpcPeers, type Peers } from './peers';
import { Replies } from './replies';

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
  const fetch = throughEgress(egressFetch(egressPolicyFrom(config)));
  const replies = new Replies(
    rt.store,
    rt.relay,
    rt.logger,
    fetch,
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
