import {
  createRedisClient,
  egressPolicyFrom,
  FeedNotifier,
  JwtVerifier,
  openRuntime,
  registration,
  serve,
  type RunningService,
} from '@svc/kit';
import { TOPICS } from '@svc/contracts';
import { identityV1 } from '@svc/proto';
import { ALL_COLLECTIONS, revocations } from './collections';
import { identityConfig } from './config';
import { emailOutbox } from './mail/outbox';
import { EmailSender } from './mail/sender';
import { fileTransport, smtpTransport } from './mail/transport';
import { AUDIT_COLLECTIONS, AuditChainer } from './audit/log';
import { auditRecordedHandler } from './audit/handlers';
import { signInFailures } from './audit/sign-in-failures';
import type { IdentityDeps } from './context';
import { identityHandlers } from './handlers';
import { FailureThrottle } from './login-guard';
import { planChangeHandler } from './plan-changes';
import { configurePasswordHashing } from './passwords';
import { SigningKeys } from './signing-keys';

/** Redis channel on which gateways hear about revocations at once (they also watch WatchRevocations). */
export const REVOCATION_CHANNEL = 'svc:revocations';

export async function startIdentity(env: NodeJS.ProcessEnv = process.env): Promise<RunningService> {
  const rt = await openRuntime({
    name: 'identity',
    defaultPort: 50051,
    config: identityConfig,
    collections: [...ALL_COLLECTIONS, ...AUDIT_COLLECTIONS, signInFailures, emailOutbox],
    env,
  });
  const keys = new SigningKeys(rt.store, rt.box);
  await keys.load();
  // With REDIS_URL, the client that pokes gateways about revocations (kit loads ioredis only then).
  const redis = rt.config.redisUrl
    ? createRedisClient({ ...rt.config, redisUrl: rt.config.redisUrl }, { lazyConnect: false, maxRetriesPerRequest: 2 })
    : null;
  redis?.on('error', (err) => rt.logger.warn({ err: err.message }, 'redis error'));
  configurePasswordHashing({
    concurrency: rt.config.passwordHashConcurrency,
    queue: rt.config.passwordHashQueue,
    perAddressQueue: rt.config.passwordHashQueuePerAddress,
    maxWaitMs: rt.config.passwordHashMaxWaitMs,
    cost: rt.config.passwordHashCost,
  });
  const feed = await FeedNotifier.open(rt.store, revocations, { pollMs: rt.config.revocationPollMs, logger: rt.logger, wake: rt.wake });
  const audit = new AuditChainer(rt.store, rt.logger, rt.config.auditRetentionDays, rt.relay);
  const c = rt.config;
  const transport = c.smtpUrl
    ? smtpTransport(c.smtpUrl, c.emailFrom, c.smtpTimeoutMs)
    : fileTransport(`${c.dataDir}/outbox`, c.emailFrom, rt.logger);
  const mail = new EmailSender({ store: rt.store, send: transport.send, logger: rt.logger, leaseMs: c.smtpTimeoutMs + 15_000 });
  const deps: IdentityDeps = {
    audit,
    mail,
    egress: egressPolicyFrom(rt.config),
    loginThrottle: new FailureThrottle({
      perAddress: rt.config.loginAttemptsPerAddress,
      perAccountAddress: rt.config.loginAttemptsPerAccountAddress,
      windowMs: rt.config.loginAttemptWindowS * 1000,
      maxEntries: 100_000,
    }),
    store: rt.store,
    bus: rt.bus,
    relay: rt.relay,
    keys,
    box: rt.box,
    logger: rt.logger,
    settings: {
      maxApiKeysPerTenant: rt.config.maxApiKeysPerTenant,
      maxSecretsPerTenant: rt.config.maxSecretsPerTenant,
      maxMembersPerTenant: rt.config.maxMembersPerTenant,
      maxModelsPerTenant: rt.config.maxModelsPerTenant,
      pricing: { creditsPerUsd: rt.config.creditsPerUsd, creditsPer1kTokens: rt.config.creditsPer1kTokens },
      issuer: rt.config.jwtIssuer,
      audience: rt.config.jwtAudience,
      accessTokenTtlS: rt.config.accessTokenTtlS,
      refreshTokenTtlS: rt.config.refreshTokenTtlS,
      sessionTtlS: rt.config.sessionTtlS,
      serviceTokenTtlS: rt.config.serviceTokenTtlS,
      platformLlm: rt.config.llmProvider
        ? {
            provider: rt.config.llmProvider,
            model: rt.config.llmModel ?? '',
            baseUrl: rt.config.llmBaseUrl ?? null,
            apiKey: rt.config.llmApiKey ?? null,
          }
        : null,
      accounts: {
        publicUrl: c.publicUrl ?? `http://${c.gatewayHost}:${c.gatewayPort}`,
        emailDomain: c.emailFrom.replace(/>$/, '').split('@').pop()!,
        invitationTtlMs: Math.round(Number(c.invitationTtlHours) * 3_600_000),
        passwordResetTtlMs: c.passwordResetTtlMinutes * 60_000,
        verificationTtlMs: c.emailVerificationTtlHours * 3_600_000,
        requireVerifiedEmail: c.requireVerifiedEmail,
      },
    },
    announceRevocation: () => {
      feed.announce();
      void redis?.publish(REVOCATION_CHANNEL, String(Date.now())).catch(() => undefined);
    },
  };
  const verifier = new JwtVerifier({ issuer: rt.config.jwtIssuer, audience: rt.config.jwtAudience, fetchJwks: () => keys.getJwks() });
  const applyPlanChange = planChangeHandler(rt.store, rt.logger, deps.announceRevocation);
  const applyAuditRecord = auditRecordedHandler(rt.store, audit);
  audit.start(rt.wake);
  mail.start(rt.wake);
  return serve(rt, {
    verifier,
    healthNames: ['identity.v1.IdentityService'],
    subscriptions: [
      {
        group: 'identity',
        topics: [TOPICS.billing],
        handler: (message) =>
          Promise.all([applyPlanChange(message), applyAuditRecord(message)]).then(
            () => undefined,
            (err: unknown) => {
              rt.logger.warn({ err, eventId: message.id }, 'plan change failed; the bus will retry');
              throw err;
            },
          ),
      },
    ],
    registrations: [
      registration({
        definition: identityV1.IdentityServiceService,
        implementation: {
          ...identityHandlers(deps, rt.config),
          watchRevocations: feed.serveWatch,
        },
        publicMethods: [
          'register',
          'login',
          'refresh',
          'authenticate',
          'getJwks',
          'listRevocations',
          'watchRevocations',
          'startCliLogin',
          'getCliLogin',
          'exchangeCliLogin',
          'exchangeExternalToken',
          'listOAuthProviders',
          'startOAuth',
          'completeOAuth',
          'acceptInvitation',
          'forgotPassword',
          'resetPassword',
          'verifyEmail',
        ],
      }),
    ],
    beforeStop: () => {
      audit.halt();
      void mail.stop();
      feed.stop();
    },
    onStop: async () => {
      await audit.stop();
      await mail.stop();
      transport.close();
      await redis?.quit().catch(() => undefined);
    },
  });
}
