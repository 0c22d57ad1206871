import { capCounters, egressStream, egressPolicyFrom, openRuntime, registration, serve, type RunningService } from '@svc/kit';
import { CreditReservations, identityVerifier, keptKeyLimits } from '@svc/contracts';
import { CircuitBreaker, DEFAULT_BREAKER_WINDOW_MS, throughEgress } from '@svc/llm';
import { chatV1 } from '@svc/proto';
import { messages, responses, sessions } from './collections';
import { chatConfig } from './config';
import { purgeExpiredResponses } from './purge';
import { creditCheck, type CreditCheck } from './credits';
import { CreditEscrow } from './escrow';
import { chatHandlers } from './handlers';
import { OwnerRelay } from './owner-relay';
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
  const transport = throughEgress(egressStream(egressPolicyFrom(config)));
  // Every reply reserves its most possible cost in billing before it starts (contracts CreditReservations), or carves
  // it from this process's escrow of the tenant's credits.
  const gate = options.credits ? null : new CreditReservations(config.billingAddr, config.grpcDeadlineMs);
  const escrow = gate && config.creditEscrow ? new CreditEscrow(gate, rt.logger) : null;
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
      ...(escrow ? { escrow } : {}),
    },
  );
  await replies.startSweeping();
  escrow?.start();
  const credits =
    options.credits ??
    creditCheck({
      gate: gate!,
      escrow,
      keyLimits: keptKeyLimits(async (token) => (await identity.getCallerKeyLimits({}, { token })).limits, {
        onRefreshError: (err) => rt.logger.debug({ err }, "refreshing a key's limits failed; the kept answer serves until its hard age"),
      }),
      creditsPer1kTokens: config.creditsPer1kTokens,
    });
  // Responses past RESPONSES_RETENTION_HOURS are deleted (their session's messages stay with the session).
  const purger = setInterval(() => {
    purgeExpiredResponses(rt.store).catch((err: unknown) => rt.logger.warn({ err }, 'purging expired responses failed; will retry'));
  }, 60_000);
  purger.unref();
  const owners = config.peerAddr ? new OwnerRelay(config.peerAddr) : undefined;
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
          owners,
        }),
      }),
    ],
    onStop: async () => {
      clearInterval(purger);
      owners?.close();
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
      // What the escrows hold beyond the ended replies goes back before the channel to billing closes.
      await escrow?.stop().catch((err: unknown) => rt.logger.warn({ err }, 'returning credit escrows failed; billing will expire them'));
      await svc.stop();
    },
  };
}
