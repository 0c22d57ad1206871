import { createLocalJWKSet, errors as joseErrors, jwtVerify, type JSONWebKeySet, type JWTPayload } from 'jose';
import { AppError } from './errors';

/** Claims of every access token (CONTRACT.md 3). `sid` ties a token to its session for revocation. */
export interface AuthClaims {
  /** user id */
  sub: string;
  /** tenant id */
  tid: string;
  typ: 'user' | 'api_key' | 'cli';
  /** present when the credential is limited to these scopes */
  scp?: string[];
  role: 'owner' | 'admin' | 'member';
  /** session id (user, cli) or api key id (api_key) */
  sid: string;
  env?: string;
  jti: string;
  iat: number;
  /** Issue time in milliseconds (`iat` has whole seconds); user revocations compare against it. */
  ims?: number;
  exp: number;
}

/** When a token was issued, in milliseconds: `ims`, or for a token without it the end of its `iat` second. */
export function issuedAtMs(claims: Pick<AuthClaims, 'iat' | 'ims'>): number {
  return claims.ims ?? claims.iat * 1000 + 999;
}

export const JWT_ALG = 'ES256';

export interface JwtVerifierOptions {
  issuer: string;
  audience: string;
  /** Fetches the signer's current public keys (identity's JWKS). */
  fetchJwks: () => Promise<JSONWebKeySet>;
  /** Verified tokens remembered, so the steady state does no signature check per request. */
  cacheSize?: number;
}

/**
 * Verifies access tokens against the identity service's JWKS. Only ES256 is accepted (so `none` and HMAC
 * tokens fail), the key set is refetched when an unknown `kid` appears (at most every 5 s), and verified
 * tokens are cached until they expire.
 */
export class JwtVerifier {
  private keys: ReturnType<typeof createLocalJWKSet> | null = null;
  private lastFetch = 0;
  private fetching: Promise<void> | null = null;
  private readonly cache = new Map<string, AuthClaims>();
  private readonly cacheSize: number;

  constructor(private readonly options: JwtVerifierOptions) {
    this.cacheSize = options.cacheSize ?? 10_000;
  }

  /** The claims of an already verified, unexpired token, without waiting: the hot path of every request. */
  cached(token: string): AuthClaims | undefined {
    const hit = this.cache.get(token);
    return hit && hit.exp * 1000 > Date.now() ? hit : undefined;
  }

  async verify(token: string): Promise<AuthClaims> {
    const cached = this.cache.get(token);
    if (cached) {
      if (cached.exp * 1000 > Date.now()) return cached;
      this.cache.delete(token);
      throw new AppError('UNAUTHORIZED', 'Access token expired');
    }
    const claims = await this.verifyUncached(token);
    if (this.cache.size >= this.cacheSize) this.cache.delete(this.cache.keys().next().value!);
    this.cache.set(token, claims);
    return claims;
  }

  private async verifyUncached(token: string): Promise<AuthClaims> {
    if (!this.keys) await this.refresh(true);
    try {
      return toClaims(await this.check(token));
    } catch (err) {
      if (err instanceof joseErrors.JWKSNoMatchingKey && (await this.refresh(false))) {
        try {
          return toClaims(await this.check(token));
        } catch (retryErr) {
          throw asUnauthorized(retryErr);
        }
      }
      throw asUnauthorized(err);
    }
  }

  private async check(token: string): Promise<JWTPayload> {
    const { payload } = await jwtVerify(token, this.keys!, {
      issuer: this.options.issuer,
      audience: this.options.audience,
      algorithms: [JWT_ALG],
      requiredClaims: ['sub', 'exp', 'iat', 'jti'],
    });
    return payload;
  }

  /** Refetches the key set; returns false when it was refetched too recently to try again. */
  private async refresh(force: boolean): Promise<boolean> {
    if (!force && Date.now() - this.lastFetch < 5000) return false;
    this.fetching ??= this.options
      .fetchJwks()
      .then((jwks) => {
        this.keys = createLocalJWKSet(jwks);
        this.lastFetch = Date.now();
      })
      .finally(() => (this.fetching = null));
    await this.fetching;
    return true;
  }
}

function toClaims(p: JWTPayload): AuthClaims {
  const typ = p.typ as AuthClaims['typ'];
  const role = p.role as AuthClaims['role'];
  if (typeof p.tid !== 'string' || !['user', 'api_key', 'cli'].includes(typ) || typeof p.sid !== 'string')
    throw new AppError('UNAUTHORIZED', 'Access token is missing required claims');
  if (!['owner', 'admin', 'member'].includes(role)) throw new AppError('UNAUTHORIZED', 'Access token has no role');
  if (p.scp !== undefined && !(Array.isArray(p.scp) && p.scp.every((s) => typeof s === 'string')))
    throw new AppError('UNAUTHORIZED', 'Access token scopes are malformed');
  return {
    sub: p.sub!,
    tid: p.tid,
    typ,
    role,
    sid: p.sid,
    scp: p.scp as string[] | undefined,
    env: typeof p.env === 'string' ? p.env : undefined,
    jti: p.jti!,
    iat: p.iat!,
    ...(typeof p.ims === 'number' && Number.isFinite(p.ims) && Math.floor(p.ims / 1000) === p.iat ? { ims: p.ims } : {}),
    exp: p.exp!,
  };
}

function asUnauthorized(err: unknown): AppError {
  if (err instanceof AppError) return err;
  if (err instanceof joseErrors.JWTExpired) return new AppError('UNAUTHORIZED', 'Access token expired');
  return new AppError('UNAUTHORIZED', 'Access token is not valid');
}
