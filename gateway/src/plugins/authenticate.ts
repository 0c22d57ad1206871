import { BlockList, isIP } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '@svc/kit';
import type { CredentialResolver } from '../lib/credentials';
import { authorize, POLICIES, type Policy } from '../lib/policy';
import type { Principal } from '../lib/principal';
import type { RateDecision, RateLimiter } from '../lib/rate-limiter';

export const SESSION_COOKIE = 'svc_session';
const JWT_SHAPE = /^eyJ[\w-]*\.[\w-]+\.[\w-]+$/;
const UNSAFE = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

export interface AuthOptions {
  resolver: CredentialResolver;
  limiter: RateLimiter;
  /** Origin of PUBLIC_URL, read per request (known only after listen when the port is 0). */
  publicOrigin: () => string;
}

export function readCookie(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return decodeURIComponent(part.slice(eq + 1).trim());
  }
  return undefined;
}

/**
 * Runs before the body is read, in the order of CONTRACT.md: authenticate, rate limit, IP allowlist, then the
 * route's policy (scope, role, credential kind). Validation follows in Fastify's own stage.
 */
export function registerAuthentication(app: FastifyInstance, options: AuthOptions): void {
  const allowlists = new Map<string, BlockList>();
  app.decorateRequest('principal', null);

  /** Rate limit, IP allowlist and policy for a resolved principal; throws the first refusal. */
  function admit(request: FastifyRequest, reply: FastifyReply, principal: Principal, d: RateDecision | null): void {
    request.principal = principal;
    if (d) {
      reply.header('X-RateLimit-Limit', d.limit).header('X-RateLimit-Remaining', d.remaining).header('X-RateLimit-Reset', d.reset);
      if (!d.allowed) {
        reply.header('Retry-After', Math.max(1, d.reset - Math.floor(Date.now() / 1000)));
        throw new AppError('RATE_LIMIT_EXCEEDED', 'Rate limit exceeded', { limit: d.limit, reset: d.reset });
      }
    }
    if (principal.type === 'api_key' && principal.ipAllowlist.length && !allowed(principal, request.ip, allowlists))
      throw new AppError('FORBIDDEN', 'Requests from this address are not allowed for this tenant', { reason: 'ip_not_allowed' });
    authorize(POLICIES[request.routeOptions.config.access!], principal);
  }

  // Callback style on purpose: a known credential with the in-memory limiter is decided without a single await.
  app.addHook('onRequest', (request, reply, done) => {
    const { access, rateLimited } = request.routeOptions.config;
    if (!access || !POLICIES[access].authenticate) return done();
    let credential: Credential;
    try {
      credential = credentialOf(request, options);
      // A route for API keys only: a token or a cookie is refused before anything is resolved (401, not 403).
      if ((POLICIES[access] as Policy).apiKeyOnly && credential.kind !== 'api_key')
        throw new AppError('UNAUTHORIZED', 'This API authenticates with an API key only (Authorization: Bearer <API key>)', {
          reason: 'api_key_required',
        });
      const known = options.resolver.cached(credential.value, credential.kind);
      if (known && (!rateLimited || canDecideSync(options.limiter, known))) {
        admit(request, reply, known, rateLimited ? decideSync(options.limiter, known) : null);
        return done();
      }
    } catch (err) {
      return done(err as Error);
    }
    const resolving =
      credential.kind === 'jwt'
        ? options.resolver.fromJwt(credential.value)
        : options.resolver.fromOpaque(credential.value, credential.kind);
    resolving
      .then(async (principal) => admit(request, reply, principal, rateLimited ? await decide(options.limiter, principal) : null))
      .then(() => done(), done);
  });
}

export const limitKey = (p: Principal) => (p.type === 'api_key' ? `k:${p.credentialId}` : `u:${p.userId}`);

/** Fixed 60 s windows for an API key's own requestsPerMinute (CONTRACT.md 8). */
export const KEY_RATE_WINDOW_S = 60;

/** An API key's requestsPerMinute replaces the principal limit (RATE_LIMIT_MAX) for that key. */
const decide = (limiter: RateLimiter, p: Principal): Promise<RateDecision> => {
  const rpm = p.limits?.requestsPerMinute;
  return rpm ? limiter.hitCapped(limitKey(p), rpm, KEY_RATE_WINDOW_S) : limiter.hit(limitKey(p));
};
const canDecideSync = (limiter: RateLimiter, p: Principal): boolean =>
  p.limits?.requestsPerMinute ? !!limiter.hitCappedSync : !!limiter.hitSync;
const decideSync = (limiter: RateLimiter, p: Principal): RateDecision => {
  const rpm = p.limits?.requestsPerMinute;
  return rpm ? limiter.hitCappedSync!(limitKey(p), rpm, KEY_RATE_WINDOW_S) : limiter.hitSync!(limitKey(p));
};

interface Credential {
  value: string;
  kind: 'jwt' | 'api_key' | 'cookie';
}

/** The request's credential, checked for shape (and, for cookies, CSRF), not yet resolved. */
function credentialOf(request: FastifyRequest, options: AuthOptions): Credential {
  const header = request.headers.authorization;
  if (header !== undefined) {
    const match = /^Bearer ([!-~]{1,4096})$/.exec(header);
    if (!match) throw new AppError('UNAUTHORIZED', 'Authorization must be "Bearer <API key or access token>"');
    return { value: match[1], kind: JWT_SHAPE.test(match[1]) ? 'jwt' : 'api_key' };
  }
  const cookie = readCookie(request.headers.cookie, SESSION_COOKIE);
  if (cookie) {
    // Cookies ride along on cross-site requests: a write must come from our own pages (CSRF).
    if (UNSAFE.has(request.method) && request.headers.origin !== options.publicOrigin())
      throw new AppError('FORBIDDEN', 'Cross-origin request refused', { reason: 'origin_mismatch' });
    return { value: cookie, kind: 'cookie' };
  }
  throw new AppError('UNAUTHORIZED', 'Authentication required');
}

function allowed(p: Principal, ip: string, cache: Map<string, BlockList>): boolean {
  const key = `${p.tenantId}|${p.ipAllowlist.join(',')}`;
  let list = cache.get(key);
  if (!list) {
    list = new BlockList();
    for (const entry of p.ipAllowlist) {
      const [addr, prefix] = entry.split('/');
      const type = isIP(addr) === 6 ? 'ipv6' : 'ipv4';
      if (prefix !== undefined) list.addSubnet(addr, Number(prefix), type);
      else list.addAddress(addr, type);
    }
    if (cache.size > 10_000) cache.clear();
    cache.set(key, list);
  }
  const family = isIP(ip);
  if (!family) return false;
  // An IPv4 client seen as an IPv4-mapped IPv6 address matches IPv4 entries.
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (mapped) return list.check(mapped[1], 'ipv4') || list.check(ip, 'ipv6');
  return list.check(ip, family === 6 ? 'ipv6' : 'ipv4');
}
