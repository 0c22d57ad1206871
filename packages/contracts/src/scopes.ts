/** The scopes of spec 5.8: what a limited API key may do. */
export const SCOPES = [
  'projects:read',
  'projects:write',
  'billing:read',
  'billing:write',
  'secrets:read',
  'secrets:write',
  'agents:read',
  'agents:write',
  /** The OpenAI-compatible API under /v1 (CONTRACT.md 9). */
  'llm:use',
  /** The provider pass-through under /v1/passthrough (CONTRACT.md 9). */
  'llm:passthrough',
  'events:read',
  /** The audit log (CONTRACT.md 10); owners and admins only. */
  'audit:read',
] as const;
export type Scope = (typeof SCOPES)[number];

export const ROLES = ['owner', 'admin', 'member'] as const;
export type Role = (typeof ROLES)[number];

/** API key types and their secret prefixes (spec 5.4 with the neutral `svc_` word). */
export const API_KEY_TYPES = {
  sdk: 'svc_sdk_',
  cli: 'svc_cli_',
  ci: 'svc_ci_',
  integration: 'svc_int_',
  marketplace: 'svc_mkt_',
} as const;
export type ApiKeyType = keyof typeof API_KEY_TYPES;
export const API_KEY_ENVIRONMENTS = ['development', 'staging', 'production'] as const;

/** Opaque credential prefixes other than API keys. */
export const SESSION_COOKIE_PREFIX = 'svc_sess_';
export const REFRESH_TOKEN_PREFIX = 'svc_rt_';
