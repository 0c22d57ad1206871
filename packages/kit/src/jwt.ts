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
  /** An API key's concurrency limit (CONTRACT.md 8): runs and replies the services let it have at once. */
  kcc?: number;
  /** The user has not verified their email (CONTRACT.md 13); absent once they have. */
  unv?: boolean;
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
  /** Fetches the signer's current public keys (identity's JWKS, read from its store: every key any replica signs with). */
  fetchJwks: () => Promise<JSONWebKeySet>;
  /** Verified tokens remembered, so the steady state does no signature check per request. */
  cacheSize?: number;
  /** Least time between two starts of a key set fetch (default 1000 ms): what forged `kid`s can cost identity. */
  minRefreshMs?: number;
}

/** This process's monotonic clock (ms). */
const monotonic = (): number => performance.now();

/**
 * Verifies access tokens against the identity service's JWKS. Only ES256 is accepted (so `none` and HMAC
 * tokens fail), and verified tokens are cached until they expire.
 *
 * A token whose `kid` is not in the key set waits for a fetch that started after the token arrived, then is
 * checked once more. Identity stores a key before any replica signs with it, and answers the JWKS from its store,
 * so such a fetch holds the key of every genuine token: no window in which a fresh token is refused (a fixed
 * "not again within N s" rule refused every token of a key first seen inside it). Fetches are shared by every
 * waiter, one at a time and at most one start per `minRefreshMs`: a flood of forged `kid`s costs identity at
 * most one call per interval, and each forged token waits about an interval for its 401.
 */
export class JwtVerifier {
  private keys: ReturnType<typeof createLocalJWKSet> | null = null;
  /** When the fetch that gave `keys` started (monotonic). */
  private keysFrom = -Infinity;
  private lastStart = -Infinity;
  private fetching: { startedAt: number; done: Promise<void> } | null = null;
  private pause: Promise<void> | null = null;
  private readonly cache = new Map<string, AuthClaims>();
  private readonly cacheSize: number;
  private readonly minRefreshMs: number;

  constructor(private readonly options: JwtVerifierOptions) {
    this.cacheSize = options.cacheSize ?? 10_000;
    this.minRefreshMs = options.minRefreshMs ?? 1000;
  }

  /** The claims of an already verified, unexpired token, without waiting: the hot path of every request. */
  cached(token: string): AuthClaims | undefined {
    const hit = this.cache.get(token);
    return hit && hit.exp * 1000 > Date.now() ? hit : undefined;
  }

  /** True once a key set has been fetched (readiness). */
  get loaded(): boolean {
    return this.keys !== null;
  }

  /** Fetches the key set unless one is loaded; rejects with the fetch's error (identity unreachable). */
  async load(): Promise<void> {
    if (!this.keys) await this.keysSince(-Infinity);
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
    const arrived = monotonic();
    if (!this.keys) await this.keysSince(-Infinity);
    try {
      return toClaims(await this.check(token));
    } catch (err) {
      if (!(err instanceof joseErrors.JWKSNoMatchingKey)) throw asUnauthorized(err);
    }
    // An unknown kid: the keys of a fetch started after this token arrived hold its key, if identity signed it.
    await this.keysSince(arrived);
    try {
      return toClaims(await this.check(token));
    } catch (err) {
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

  /** Resolves once `keys` come from a fetch that started at or after `since`; rejects with such a fetch's error. */
  private async keysSince(since: number): Promise<void> {
    while (this.keysFrom < since || !this.keys) {
      const inFlight = this.fetching;
      if (inFlight) {
        // A fetch that started in time answers for this caller, its failure included; an older one is waited out.
        if (inFlight.startedAt >= since) return inFlight.done;
        await inFlight.done.catch(() => undefined);
        continue;
      }
      const wait = this.lastStart + this.minRefreshMs - monotonic();
      if (wait > 0) {
        this.pause ??= new Promise<void>((done) => setTimeout(done, wait)).finally(() => (this.pause = null));
        await this.pause;
        continue;
      }
      this.startFetch();
    }
  }

  private startFetch(): void {
    const startedAt = monotonic();
    this.lastStart = startedAt;
    const done: Promise<void> = this.options
      .fetchJwks()
      .then((jwks) => {
        this.keys = createLocalJWKSet(jwks);
        this.keysFrom = startedAt;
      })
      .finally(() => {
        if (this.fetching?.done === done) this.fetching = null;
      });
    this.fetching = { startedAt, done };
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
    ...(typeof p.kcc === 'number' && Number.isInteger(p.kcc) && p.kcc > 0 ? { kcc: p.kcc } : {}),
    ...(p.unv === true ? { unv: true } : {}),
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
