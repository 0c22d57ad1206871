import type Redis from 'ioredis';
import {
  egressPolicyFrom,
  FeedNotifier,
  field,
  JwtVerifier,
  openRuntime,
  redisTls,
  registration,
  serve,
  type RunningService,
} from '@svc/kit';
import { pricingConfig, requireVerifiedEmailField, TOPICS } from '@svc/contracts';
import { identityV1 } from '@svc/proto';
import { ALL_COLLECTIONS, revocations } from './collections';
import { emailOutbox } from './mail/outbox';
import { EmailSender } from './mail/sender';
import { fileTransport, smtpTransport } from './mail/transport';
import { accountLinkHandlers } from './handlers/account-links';
import { invitationHandlers } from './handlers/invitations';
import { AUDIT_COLLECTIONS, AuditChainer } from './audit/log';
import { auditHandlers, auditRecordedHandler } from './audit/handlers';
import { signInFailures } from './audit/sign-in-failures';
import type { IdentityDeps } from './context';
import { apiKeyHandlers } from './handlers/api-keys';
import { authHandlers } from './handlers/auth';
import { cliLoginHandlers } from './handlers/cli-login';
import { externalAuthHandlers } from './handlers/external-auth';
import { idempotencyClaimHandlers } from './handlers/idempotency-claims';
import { llmSettingsHandlers } from './handlers/llm-settings';
import { modelHandlers } from './handlers/models';
import { networkHandlers } from './handlers/network';
import { secretHandlers } from './handlers/secrets';
import { teamHandlers } from './handlers/team';
import { FailureThrottle } from './login-guard';
import { planChangeHandler } from './plan-changes';
import { configurePasswordHashing } from './passwords';
import { parseOAuthProviders } from './oidc';
import { SigningKeys } from './signing-keys';

/**
 * The Redis client that pokes gateways; ioredis is required only when REDIS_URL is set (not in the embedded default).
 * TLS (rediss://) and an ACL user come with the URL; REDIS_TLS_CA_FILE adds the CA.
 */
function revocationPublisher(config: { redisUrl: string; redisTlsCaFile?: string }): Redis {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- deliberate lazy load
  const { Redis: Client } = require('ioredis') as typeof import('ioredis');
  return new Client(config.redisUrl, { ...redisTls(config), lazyConnect: false, maxRetriesPerRequest: 2 });
}

/** Redis channel on which gateways hear about revocations at once (they also watch WatchRevocations). */
export const REVOCATION_CHANNEL = 'svc:revocations';

const config = {
  // At most an hour: gateways remember revocations for two hours (gateway/src/lib/revocations.ts).
  accessTokenTtlS: field('ACCESS_TOKEN_TTL_S', 'int', { default: '900', min: 30, max: 3600 }),
  refreshTokenTtlS: field('REFRESH_TOKEN_TTL_S', 'int', { default: String(30 * 86400), min: 60 }),
  sessionTtlS: field('SESSION_TTL_S', 'int', { default: String(30 * 86400), min: 60 }),
  serviceTokenTtlS: field('SERVICE_TOKEN_TTL_S', 'int', { default: '300', min: 30, max: 3600 }),
  llmProvider: field('LLM_PROVIDER', 'string', { oneOf: ['openai', 'anthropic', 'openai-compatible'] }),
  llmBaseUrl: field('LLM_BASE_URL', 'url'),
  llmApiKey: field('LLM_API_KEY', 'string', { secret: true }),
  llmModel: field('LLM_MODEL', 'string'),
  maxApiKeysPerTenant: field('API_KEYS_PER_TENANT', 'int', { default: '100', min: 1, max: 100_000 }),
  maxSecretsPerTenant: field('SECRETS_PER_TENANT', 'int', { default: '1000', min: 1, max: 1_000_000 }),
  maxMembersPerTenant: field('MEMBERS_PER_TENANT', 'int', { default: '1000', min: 1, max: 1_000_000 }),
  maxModelsPerTenant: field('MODELS_PER_TENANT', 'int', { default: '100', min: 1, max: 100_000 }),
  ...pricingConfig,
  passwordHashConcurrency: field('PASSWORD_HASH_CONCURRENCY', 'int', { default: '2', min: 1, max: 64 }),
  passwordHashQueue: field('PASSWORD_HASH_QUEUE', 'int', { default: '64', min: 0, max: 100_000 }),
  passwordHashQueuePerAddress: field('PASSWORD_HASH_QUEUE_PER_ADDRESS', 'int', { default: '4', min: 0, max: 100_000 }),
  passwordHashMaxWaitMs: field('PASSWORD_HASH_MAX_WAIT_MS', 'int', { default: '3000', min: 10, max: 60_000 }),
  loginAttemptsPerAddress: field('LOGIN_ATTEMPTS_PER_ADDRESS', 'int', { default: '30', min: 1 }),
  loginAttemptsPerAccountAddress: field('LOGIN_ATTEMPTS_PER_ACCOUNT_ADDRESS', 'int', { default: '10', min: 1 }),
  loginAttemptWindowS: field('LOGIN_ATTEMPT_WINDOW_S', 'int', { default: '300', min: 1, max: 86_400 }),
  oidcIssuer: field('OIDC_ISSUER', 'url'),
  oidcAudience: field('OIDC_AUDIENCE', 'string'),
  oauthProviders: field('OAUTH_PROVIDERS', 'string', { secret: true }),
  // How often a replica watched by gateways looks for revocations that other replicas recorded.
  revocationPollMs: field('REVOCATION_POLL_MS', 'int', { default: '500', min: 50, max: 1000 }),
  // The audit log keeps entries this long (CONTRACT.md 10); the chain then starts at the oldest kept entry.
  auditRetentionDays: field('AUDIT_RETENTION_DAYS', 'int', { default: '365', min: 1, max: 36_500 }),
  // Accounts' emails (CONTRACT.md 13). Without SMTP_URL each email goes to the log and DATA_DIR/outbox/<id>.eml.
  smtpUrl: field('SMTP_URL', 'string', { secret: true, pattern: /^smtps?:\/\// }),
  emailFrom: field('EMAIL_FROM', 'string', { default: 'svc <no-reply@localhost>', pattern: /@[^@\s>]+>?$/ }),
  smtpTimeoutMs: field('SMTP_TIMEOUT_MS', 'int', { default: '30000', min: 1000, max: 600_000 }),
  // Where the emailed links point (the console); default http://HOST:PORT as the gateway's.
  publicUrl: field('PUBLIC_URL', 'url'),
  gatewayHost: field('HOST', 'string', { default: '127.0.0.1' }),
  gatewayPort: field('PORT', 'int', { default: '8080', min: 0, max: 65535 }),
  invitationTtlHours: field('INVITATION_TTL_HOURS', 'string', { default: '72', pattern: /^\d{1,5}(\.\d{1,9})?$/ }),
  passwordResetTtlMinutes: field('PASSWORD_RESET_TTL_MINUTES', 'int', { default: '60', min: 1, max: 10_080 }),
  emailVerificationTtlHours: field('EMAIL_VERIFICATION_TTL_HOURS', 'int', { default: '72', min: 1, max: 8760 }),
  requireVerifiedEmail: requireVerifiedEmailField,
};

export async function startIdentity(env: NodeJS.ProcessEnv = process.env): Promise<RunningService> {
  const rt = await openRuntime({
    name: 'identity',
    defaultPort: 50051,
    config,
    collections: [...ALL_COLLECTIONS, ...AUDIT_COLLECTIONS, signInFailures, emailOutbox],
    env,
  });
  const keys = new SigningKeys(rt.store, rt.box);
  await keys.load();
  const redis = rt.config.redisUrl ? revocationPublisher({ ...rt.config, redisUrl: rt.config.redisUrl }) : null;
  redis?.on('error', (err) => rt.logger.warn({ err: err.message }, 'redis error'));
  configurePasswordHashing(
    rt.config.passwordHashConcurrency,
    rt.config.passwordHashQueue,
    rt.config.passwordHashQueuePerAddress,
    rt.config.passwordHashMaxWaitMs,
  );
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
          ...authHandlers(deps),
          ...apiKeyHandlers(deps),
          ...teamHandlers(deps),
          ...invitationHandlers(deps),
          ...accountLinkHandlers(deps),
          ...networkHandlers(deps),
          ...llmSettingsHandlers(deps),
          ...secretHandlers(deps),
          ...modelHandlers(deps),
          ...cliLoginHandlers(deps),
          ...auditHandlers(deps),
          ...idempotencyClaimHandlers(deps),
          watchRevocations: feed.serveWatch,
          ...externalAuthHandlers(deps, {
            exchange: rt.config.oidcIssuer ? { issuer: rt.config.oidcIssuer, audience: rt.config.oidcAudience ?? '' } : null,
            oauth: parseOAuthProviders(rt.config.oauthProviders),
          }),
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
