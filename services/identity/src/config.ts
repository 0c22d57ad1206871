import { field } from '@svc/kit';
import { pricingConfig, requireVerifiedEmailField } from '@svc/contracts';

/** Settings of the identity service beyond the common ones. */
export const identityConfig = {
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
  // log2 of scrypt's N for new hashes (15, OWASP's floor, by default); a stored hash keeps the cost it was made with.
  passwordHashCost: field('PASSWORD_HASH_COST', 'int', { default: '15', min: 10, max: 20 }),
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
