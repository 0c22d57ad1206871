import { AppError, type AuthClaims, issuedAtMs, type JwtVerifier, sha256Hex } from '@svc/kit';
import type { identityV1 } from '@svc/proto';
import { principalFromClaims, type Principal } from './principal';
import type { RevocationEvent, RevocationWatcher } from './revocations';

interface Entry {
  principal: Principal;
  /** Unix ms after which identity must be asked again (the minted token's expiry, minus a margin). */
  until: number;
}

const NEGATIVE_TTL_MS = 2000;
const MAX_ENTRIES = 50_000;
/** How long a bearer token waits for the revocation feed to be read (start-up, a failed read) before a 503. */
const FEED_WAIT_MS = 3000;

/**
 * Turns a credential into a Principal. Opaque credentials (API keys, session cookies) are resolved by identity
 * once and cached by their SHA-256; JWTs are verified once and cached by the verifier. Revocations from the
 * watcher drop cached entries at once, so the steady state makes no call to identity and no signature check.
 *
 * Nothing is decided from memory while the revocation feed is not current (start-up until the first read reaches
 * the feed's end, or after a failed read): an opaque credential is then resolved by identity, which checks it in its
 * store, and not cached; a bearer token waits up to `feedWaitMs` for the follower to read the feed, and is refused
 * with 503 if it has not: never accepted unchecked.
 */
export class CredentialResolver {
  private readonly cache = new Map<string, Entry>();
  private readonly negative = new Map<string, number>();
  private readonly inflight = new Map<string, Promise<Principal>>();
  /** Bumped by every revocation: an answer from identity that a revocation overtook is used once, not cached. */
  private generation = 0;

  constructor(
    private readonly authenticate: (credential: string) => Promise<identityV1.AuthenticateResponse>,
    private readonly verifier: JwtVerifier,
    private readonly revocations: RevocationWatcher,
    private readonly feedWaitMs = FEED_WAIT_MS,
  ) {
    revocations.onEntry((e) => this.evict(e));
  }

  /**
   * The principal for a credential seen before, synchronously, or undefined when it must be resolved (first use,
   * expiry). Throws for a revoked token. Most requests end here: no await, no identity call, no signature check.
   */
  cached(credential: string, kind: 'jwt' | 'api_key' | 'cookie'): Principal | undefined {
    if (!this.revocations.current) return undefined;
    if (kind === 'jwt') {
      const claims = this.verifier.cached(credential);
      return claims && this.checked(principalFromClaims(claims, credential), claims);
    }
    const hit = this.cache.get(sha256Hex(credential));
    return hit && hit.until > Date.now() ? hit.principal : undefined;
  }

  /** A bearer JWT (access token or CLI token). */
  async fromJwt(token: string): Promise<Principal> {
    const claims = await this.verifier.verify(token);
    // Start-up, or the last read failed: wait a moment for the follower's next read (it retries on its own).
    if (!this.revocations.current) await this.revocations.untilCurrent(this.feedWaitMs);
    return this.checked(principalFromClaims(claims, token), claims);
  }

  private checked(p: Principal, claims: AuthClaims): Principal {
    if (!this.revocations.current)
      throw new AppError('SERVICE_UNAVAILABLE', 'Revocations cannot be checked right now; retry shortly', {
        reason: 'revocations_unavailable',
      });
    if (this.revocations.isRevoked(p.sessionId, p.userId, issuedAtMs(claims)))
      throw new AppError('UNAUTHORIZED', 'Access token has been revoked');
    return p;
  }

  /** An API key or the session cookie value. */
  async fromOpaque(credential: string, via: 'api_key' | 'cookie'): Promise<Principal> {
    const hash = sha256Hex(credential);
    const now = Date.now();
    // While the feed is not current a kept principal may have been revoked: identity decides afresh.
    const hit = this.revocations.current ? this.cache.get(hash) : undefined;
    if (hit && hit.until > now) return hit.principal;
    if ((this.negative.get(hash) ?? 0) > now) throw new AppError('UNAUTHORIZED', 'Credential is not valid');
    let pending = this.inflight.get(hash);
    if (!pending) {
      const started: Promise<Principal> = this.resolve(hash, credential, via).finally(() => {
        if (this.inflight.get(hash) === started) this.inflight.delete(hash);
      });
      this.inflight.set(hash, (pending = started));
    }
    return pending;
  }

  private async resolve(hash: string, credential: string, via: 'api_key' | 'cookie'): Promise<Principal> {
    const generation = this.generation;
    const current = this.revocations.current;
    // A validity identity states in relative terms counts from before the question: never past identity's own end.
    const askedAt = Date.now();
    let res: identityV1.AuthenticateResponse;
    try {
      res = await this.authenticate(credential);
    } catch (err) {
      if (err instanceof AppError && err.code === 'UNAUTHORIZED') {
        if (this.negative.size > MAX_ENTRIES) this.negative.clear();
        this.negative.set(hash, Date.now() + NEGATIVE_TTL_MS);
      }
      throw err;
    }
    const p = res.principal!;
    const principal: Principal = {
      tenantId: p.tenantId,
      userId: p.userId,
      type: p.type as Principal['type'],
      credentialId: p.credentialId,
      sessionId: p.sessionId,
      role: p.role as Principal['role'],
      scopes: p.scoped ? p.scopes : undefined,
      environment: p.environment,
      ipAllowlist: p.ipAllowlist,
      token: p.serviceToken,
      via,
      ...(p.emailUnverified ? { emailUnverified: true } : {}),
      ...(p.limits && (p.limits.requestsPerMinute || p.limits.tokensPerMinute || p.limits.concurrency)
        ? {
            limits: {
              requestsPerMinute: p.limits.requestsPerMinute,
              tokensPerMinute: p.limits.tokensPerMinute,
              concurrency: p.limits.concurrency,
            },
          }
        : {}),
    };
    // Kept only when every revocation up to the answer has been read and none overtook it.
    if (!current || !this.revocations.current || generation !== this.generation) return principal;
    if (this.cache.size >= MAX_ENTRIES) this.cache.delete(this.cache.keys().next().value!);
    // Refresh 30 s before the minted token expires, so services never see an expired one; a rotated-out secret in
    // its grace period is asked about again when identity said its validity ends (counted from before the question).
    const graceEnd = p.validForMs === undefined ? Infinity : askedAt + p.validForMs;
    this.cache.set(hash, { principal, until: Math.min(p.serviceTokenExpiresAt - 30_000, graceEnd) });
    return principal;
  }

  private evict(e: RevocationEvent): void {
    // A change to the tenant's record (its plan) leaves every credential as it was.
    if (e.kind === 'tenant_changed') return;
    this.generation++;
    // Requests arriving from now on resolve afresh instead of joining an answer the revocation may have overtaken.
    this.inflight.clear();
    for (const [hash, { principal: p }] of this.cache) {
      const hitBy =
        ((e.kind === 'api_key' || e.kind === 'api_key_changed' || e.kind === 'session') && p.credentialId === e.subjectId) ||
        (e.kind === 'user' && p.userId === e.subjectId) ||
        (e.kind === 'tenant' && p.tenantId === e.subjectId);
      if (hitBy) this.cache.delete(hash);
    }
  }
}
