import { newId, nowIso, randomBase62, sha256Hex, type StoreSession } from '@svc/kit';
import { REFRESH_TOKEN_PREFIX, SESSION_COOKIE_PREFIX } from '@svc/contracts';
import type { identityV1 } from '@svc/proto';
import { refreshTokens, sessions, type ApiKeyDoc, type SessionDoc, type UserDoc } from './collections';
import type { IdentityDeps } from './context';

export interface AccessClaims {
  sub: string;
  tid: string;
  typ: 'user' | 'api_key' | 'cli';
  role: string;
  sid: string;
  scp?: string[];
  env?: string;
  kcc?: number;
  /** The user has not verified their email (absent once they have): REQUIRE_VERIFIED_EMAIL's gate at the gateway. */
  unv?: boolean;
}

/** Pass the transaction's session when signing inside one (SigningKeys.sign may read its keys). */
export async function signAccessToken(
  deps: IdentityDeps,
  claims: AccessClaims,
  ttlSeconds: number,
  within?: StoreSession,
): Promise<string> {
  const { issuer, audience } = deps.settings;
  return deps.keys.sign({ ...claims }, { issuer, audience, ttlSeconds, jti: newId('jti') }, within);
}

export function userClaims(user: UserDoc, session: SessionDoc): AccessClaims {
  return { sub: user.id, tid: user.tenantId, typ: session.type, role: user.role, sid: session.id, ...unverified(user) };
}

const unverified = (user: UserDoc) => (user.emailVerified === false ? { unv: true } : {});

export function apiKeyClaims(key: ApiKeyDoc, creator: UserDoc): AccessClaims {
  return {
    sub: creator.id,
    tid: key.tenantId,
    typ: 'api_key',
    role: creator.role,
    sid: key.id,
    env: key.environment,
    ...(key.scoped ? { scp: key.scopes } : {}),
    // The services count a key's runs and replies against it; a change reaches them with the next token (the
    // gateway drops its cached principal of the key when identity records the change).
    ...(key.limits?.concurrency ? { kcc: key.limits.concurrency } : {}),
    ...unverified(creator),
  };
}

/** A new refresh token for the session; only its hash is stored. */
export async function issueRefreshToken(deps: IdentityDeps, tx: StoreSession, session: SessionDoc): Promise<string> {
  const token = REFRESH_TOKEN_PREFIX + randomBase62(43);
  const now = Date.now();
  await tx.collection(refreshTokens).insert({
    id: sha256Hex(token),
    sessionId: session.id,
    tenantId: session.tenantId,
    usedAt: null,
    createdAt: new Date(now).toISOString(),
    expiresAt: new Date(now + deps.settings.refreshTokenTtlS * 1000).toISOString(),
  });
  return token;
}

/** Starts a session for a signed-in user: access token, refresh token and the browser cookie value. */
export async function startSession(
  deps: IdentityDeps,
  tx: StoreSession,
  user: UserDoc,
  type: 'user' | 'cli' = 'user',
): Promise<{ session: SessionDoc; tokens: identityV1.SessionTokens }> {
  const cookie = SESSION_COOKIE_PREFIX + randomBase62(43);
  const now = Date.now();
  const session: SessionDoc = {
    id: newId('ses'),
    tenantId: user.tenantId,
    userId: user.id,
    type,
    cookieHash: type === 'user' ? sha256Hex(cookie) : null,
    revokedAt: null,
    createdAt: nowIso(),
    expiresAt: new Date(now + deps.settings.sessionTtlS * 1000).toISOString(),
  };
  await tx.collection(sessions).insert(session);
  const refreshToken = await issueRefreshToken(deps, tx, session);
  const accessToken = await signAccessToken(deps, userClaims(user, session), deps.settings.accessTokenTtlS, tx);
  return {
    session,
    tokens: { accessToken, refreshToken, expiresIn: deps.settings.accessTokenTtlS, sessionToken: type === 'user' ? cookie : '' },
  };
}
