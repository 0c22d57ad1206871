import type { PricingSettings } from '@svc/llm';
import type { EgressPolicy, EventBus, Logger, OutboxRelay, SecretBox, Store } from '@svc/kit';
import type { AuditChainer } from './audit/log';
import type { FailureThrottle } from './login-guard';
import type { SigningKeys } from './signing-keys';

export interface IdentitySettings {
  /** Live (unrevoked) API keys a tenant may hold (API_KEYS_PER_TENANT). */
  maxApiKeysPerTenant: number;
  /** Secrets and members a tenant may have (SECRETS_PER_TENANT, MEMBERS_PER_TENANT). */
  maxSecretsPerTenant: number;
  maxMembersPerTenant: number;
  issuer: string;
  audience: string;
  accessTokenTtlS: number;
  refreshTokenTtlS: number;
  sessionTtlS: number;
  /** Lifetime of the JWT minted for an API key or cookie; the gateway caches it. */
  serviceTokenTtlS: number;
  /** Catalogue entries a tenant may have (MODELS_PER_TENANT). */
  maxModelsPerTenant: number;
  /** CREDITS_PER_USD and CREDITS_PER_1K_TOKENS: the catalogue shows each entry's effective price. */
  pricing: PricingSettings;
  /** The platform's default LLM (LLM_* settings), used by tenants that set none. */
  platformLlm: PlatformLlm | null;
  accounts: AccountSettings;
}

/** Invitations, password reset and email verification (CONTRACT.md 13). */
export interface AccountSettings {
  /** The console's address, for the emailed links (PUBLIC_URL). */
  publicUrl: string;
  /** The right-hand side of the emails' Message-IDs (EMAIL_FROM's domain). */
  emailDomain: string;
  invitationTtlMs: number;
  passwordResetTtlMs: number;
  verificationTtlMs: number;
  /** REQUIRE_VERIFIED_EMAIL: an unverified user may not create API keys. */
  requireVerifiedEmail: boolean;
}

export interface PlatformLlm {
  provider: string;
  model: string;
  baseUrl: string | null;
  apiKey: string | null;
}

/** Everything the identity handlers use, built once at start. */
export interface IdentityDeps {
  store: Store;
  bus: EventBus;
  relay: OutboxRelay;
  keys: SigningKeys;
  box: SecretBox;
  logger: Logger;
  settings: IdentitySettings;
  /** Where tenant-chosen URLs may point (LLM base URLs are checked when saved). */
  egress: EgressPolicy;
  /** Sign-in attempts per address and per (account, address), checked before any password hashing. */
  loginThrottle: FailureThrottle;
  /** Appends recorded audit entries to their tenants' chains: `kick()` after a change's transaction commits. */
  audit: AuditChainer;
  /** The email outbox's sender: `notify()` after a transaction that queued an email commits. */
  mail: { notify(): void };
  /** Tells gateways at once (Redis pub/sub) that a revocation was recorded; they also poll. */
  announceRevocation: () => void;
}
