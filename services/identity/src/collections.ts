import { capCounters, type CollectionDef, feedCollection, type FeedEntryDoc } from '@svc/kit';
import type { KeyLimits } from './key-limits';

export type Plan = 'free' | 'starter' | 'growth' | 'enterprise';
export type Role = 'owner' | 'admin' | 'member';
export type CredentialType = 'user' | 'api_key' | 'cli';

export interface TenantDoc {
  id: string;
  name: string;
  plan: Plan;
  /** Billing's time of the last plan change applied (tenant.plan_changed); absent before the first. */
  planChangedAt?: string;
  /** Billing's version of the last plan change applied (contracts planChangeIsNewer); absent before a numbered one. */
  planVersion?: number;
  /** Bumped by every team change that can take an owner away (compare-and-set): such changes never pass together. */
  teamRev?: number;
  ipAllowlist: string[];
  createdAt: string;
  updatedAt: string;
}

export interface UserDoc {
  id: string;
  tenantId: string;
  /** Lower-cased; unique across the platform because sign-in is by email alone. */
  email: string;
  name: string;
  role: Role;
  passwordHash: string;
  disabled: boolean;
  /** False until the verification link is opened; absent on users from before verification (counted verified). */
  emailVerified?: boolean;
  createdAt: string;
  updatedAt: string;
}

/** A signed-in session (browser, API client or CLI). Refresh tokens and the cookie belong to one. */
export interface SessionDoc {
  id: string;
  tenantId: string;
  userId: string;
  type: 'user' | 'cli';
  /** SHA-256 of the browser cookie value. */
  cookieHash: string | null;
  revokedAt: string | null;
  createdAt: string;
  expiresAt: string;
}

/** Keyed by the SHA-256 of the token; `usedAt` set once it has been rotated. */
export interface RefreshTokenDoc {
  id: string;
  sessionId: string;
  tenantId: string;
  usedAt: string | null;
  createdAt: string;
  expiresAt: string;
}

export interface ApiKeyDoc {
  id: string;
  tenantId: string;
  createdBy: string;
  name: string;
  type: string;
  environment: string;
  scopes: string[];
  scoped: boolean;
  /** First 12 characters of the key, for display. */
  start: string;
  /** SHA-256 of the whole key. The key itself is never stored. */
  hash: string;
  createdAt: string;
  lastUsedAt: string | null;
  expiresAt: string | null;
  revokedAt: string | null;
  /** Absent on keys made before limits. */
  limits?: KeyLimits;
  /** SHA-256 of the secret a rotation replaced, while it is valid: until `previousValidUntil` (identity's clock). */
  previousHash?: string | null;
  previousValidUntil?: string | null;
}

/** Append-only feed that gateways poll (and receive through Redis) to drop cached credentials. */
/**
 * An entry of the feed the gateways follow: a revoked credential, user or tenant, or (`tenant_changed`, revoking
 * nothing) a change to the tenant's record that their cached copies must drop, or (`api_key_changed`, revoking
 * nothing) a change to a key's limits or secret that cached principals of the key must drop.
 */
export interface RevocationDoc extends FeedEntryDoc {
  kind: 'api_key' | 'session' | 'user' | 'tenant' | 'tenant_changed' | 'api_key_changed';
}

export interface SigningKeyDoc {
  id: string;
  /**
   * 1, 2, ... unique: the newest signs (signing-keys.ts). Absent on keys made before generations, which every
   * replica signed with on its own; those are still published, never used to sign again.
   */
  generation?: number;
  /** Private JWK, encrypted with the master key. */
  privateJwk: string;
  publicJwk: string;
  status: 'active' | 'retired';
  createdAt: string;
}

/** One per tenant (id = tenant id). The API key is sealed with the master key. */
export interface LlmSettingsDoc {
  id: string;
  provider: string;
  model: string;
  baseUrl: string | null;
  apiKeySealed: string | null;
  temperature: number | null;
  maxTokens: number | null;
  /** Tried in order when the model fails before its first token (absent on documents of older versions). */
  fallbacks?: LlmFallbackDoc[];
  createdAt: string;
  updatedAt: string;
}

/** A fallback model; its own API key sealed like the main one. */
export interface LlmFallbackDoc {
  provider: string;
  model: string;
  /** null: the provider's public API. */
  baseUrl: string | null;
  apiKeySealed: string | null;
}

/** A tenant's secret: the current value sealed with the master key (its key id inside), never stored in the clear. */
export interface SecretDoc {
  id: string;
  tenantId: string;
  name: string;
  description: string;
  /** 1 on create, +1 on each new value; also the compare-and-set guard of an update. */
  version: number;
  valueSealed: string;
  createdAt: string;
  updatedAt: string;
}

export const tenants: CollectionDef<TenantDoc> = { name: 'tenants' };
export const llmSettings: CollectionDef<LlmSettingsDoc> = { name: 'llm_settings' };
export const users: CollectionDef<UserDoc> = {
  name: 'users',
  indexes: [{ fields: ['email'], unique: true }, { fields: ['tenantId', 'createdAt'] }],
};
export const sessions: CollectionDef<SessionDoc> = {
  name: 'sessions',
  indexes: [{ fields: ['cookieHash'] }, { fields: ['userId'] }],
};
export const refreshTokens: CollectionDef<RefreshTokenDoc> = { name: 'refresh_tokens', indexes: [{ fields: ['sessionId'] }] };
export const apiKeys: CollectionDef<ApiKeyDoc> = {
  name: 'api_keys',
  indexes: [{ fields: ['hash'], unique: true }, { fields: ['previousHash'] }, { fields: ['tenantId', 'createdAt'] }],
};
// The feed is read in seq order from a position (gateways) and newest first (the feed's look for other replicas).
export const revocations = feedCollection<RevocationDoc>('revocations');
// Ordered by generation; the unique index is what lets one replica's new key win over another's made at once.
export const signingKeys: CollectionDef<SigningKeyDoc> = {
  name: 'signing_keys',
  sortField: 'generation',
  indexes: [{ fields: ['generation'], unique: true }, { fields: [] }],
};

export const secrets: CollectionDef<SecretDoc> = {
  name: 'secrets',
  indexes: [{ fields: ['tenantId', 'name'], unique: true }, { fields: ['tenantId'] }],
};

/** A CLI login (spec 3): started by a terminal, approved or denied in a browser, exchanged once for a token. */
export interface CliLoginDoc {
  id: string;
  /** SHA-256 of the state the terminal chose; compared on approve and deny. */
  stateHash: string;
  /** base64url SHA-256 of the terminal's code verifier (PKCE S256). */
  codeChallenge: string;
  verificationCode: string;
  cliVersion: string;
  platform: string;
  status: 'pending' | 'approved' | 'denied' | 'consumed';
  /** Epoch ms; past it a login is `expired` whatever its stored status (but `consumed`). */
  expiresAtMs: number;
  /** Who approved it: the token is theirs. */
  userId: string | null;
  tenantId: string | null;
  createdAt: string;
}

export const cliLogins: CollectionDef<CliLoginDoc> = { name: 'cli_logins' };

/** A completed OAuth sign-in's state (id = its SHA-256): a state is used once. */
export interface OAuthStateDoc {
  id: string;
  expiresAtMs: number;
  createdAt: string;
}

export const oauthStates: CollectionDef<OAuthStateDoc> = { name: 'oauth_states' };

/**
 * A catalogue entry (CONTRACT.md 12): one deployment of a model that calls to `name` may go to. Its API key is sealed
 * with the master key like LLM settings' keys; `apiKeySecret` names a tenant secret read at call time instead.
 */
export interface ModelDoc {
  id: string;
  tenantId: string;
  name: string;
  provider: string;
  upstreamModel: string;
  baseUrl: string | null;
  apiKeySealed: string | null;
  apiKeySecret: string | null;
  apiVersion: string | null;
  region: string | null;
  weight: number;
  /** Credits per 1,000,000 tokens; null: the platform's price list, else the default price. */
  price: { input: number; output: number; cachedInput: number | null } | null;
  maxOutputTokens: number | null;
  enabled: boolean;
  createdAt: string;
  updatedAt: string;
}

export const models: CollectionDef<ModelDoc> = {
  name: 'models',
  indexes: [{ fields: ['tenantId', 'name'] }, { fields: ['tenantId'] }],
};

/** An invitation by email (CONTRACT.md 13); the link's token is never stored, only its SHA-256. */
export interface InvitationDoc {
  id: string;
  tenantId: string;
  email: string;
  role: Role;
  tokenHash: string;
  invitedBy: string;
  /** Stored states; `expired` is only ever computed from `expiresAt`. */
  status: 'pending' | 'accepted' | 'revoked';
  expiresAt: string;
  createdAt: string;
  updatedAt: string;
}

export const invitations: CollectionDef<InvitationDoc> = {
  name: 'invitations',
  indexes: [{ fields: ['tokenHash'], unique: true }, { fields: ['tenantId'] }, { fields: ['tenantId', 'status'] }],
};

/** A one-time token of an emailed link (password reset, email verification); id = the token's SHA-256. */
export interface AccountTokenDoc {
  id: string;
  purpose: 'password_reset' | 'email_verification';
  userId: string;
  tenantId: string;
  usedAt: string | null;
  expiresAt: string;
  createdAt: string;
}

export const accountTokens: CollectionDef<AccountTokenDoc> = { name: 'account_tokens', indexes: [{ fields: ['userId'] }] };

export const ALL_COLLECTIONS = [
  invitations,
  accountTokens,
  models,
  oauthStates,
  tenants,
  users,
  sessions,
  refreshTokens,
  apiKeys,
  revocations,
  signingKeys,
  llmSettings,
  secrets,
  cliLogins,
  capCounters,
];
