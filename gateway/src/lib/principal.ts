import type { AuthClaims } from '@svc/kit';
import type { Role } from '@svc/contracts';

/** Who is calling, resolved from the credential alone (never from a header or body). */
export interface Principal {
  tenantId: string;
  userId: string;
  type: 'user' | 'api_key' | 'cli';
  /** API key id or session id: the rate-limit and revocation unit. */
  credentialId: string;
  sessionId: string;
  role: Role;
  /** Undefined when the credential is not limited by scopes. */
  scopes?: string[];
  environment?: string;
  /** Tenant allowlist (API keys only); empty means any address. */
  ipAllowlist: string[];
  /** JWT for calls to services on this principal's behalf. */
  token: string;
  /** How the request authenticated. */
  via: 'api_key' | 'bearer_jwt' | 'cookie';
  /** An API key's limits (CONTRACT.md 8); absent for other credentials and for a key without any. */
  limits?: { requestsPerMinute?: number; tokensPerMinute?: number; concurrency?: number };
  /** The user (a key's creator) had not verified their email when the credential was read (lib/verified-email.ts). */
  emailUnverified?: boolean;
}

export function principalFromClaims(claims: AuthClaims, token: string): Principal {
  return {
    tenantId: claims.tid,
    userId: claims.sub,
    type: claims.typ,
    credentialId: claims.sid,
    sessionId: claims.sid,
    role: claims.role,
    scopes: claims.scp,
    environment: claims.env,
    ipAllowlist: [],
    token,
    via: 'bearer_jwt',
    ...(claims.unv ? { emailUnverified: true } : {}),
  };
}
