/**
 * CLI login (spec 3, CONTRACT.md 4): the terminal starts a login with a random state and a PKCE S256 challenge, the
 * user approves it in a browser (comparing the verification code shown in both), and the terminal exchanges the
 * approved login and its code verifier for a token, once. Every change of state is a compare-and-set on the stored
 * status, so concurrent token requests (or approve and deny at once), on any number of replicas, have one winner.
 * Status polls are plain reads: polling faster than `interval` costs the store nothing.
 */
import { auditChange } from '../audit/log';
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { type CallContext, errors, randomBase62, sha256Hex } from '@svc/kit';
import type { identityV1 } from '@svc/proto';
import { cliLogins, tenants, users, type CliLoginDoc } from '../collections';
import type { IdentityDeps } from '../context';
import { startSession } from '../tokens';
import { requireAuth } from './auth';
import { toTenant, toUser } from '../views';

export const CLI_LOGIN_TTL_MS = 10 * 60 * 1000;
export const CLI_POLL_INTERVAL_S = 2;
const CODE_ALPHABET = 'BCDFGHJKLMNPQRSTVWXZ';

/** 8 letters without vowels (no words), shown as XXXX-XXXX; uniform by rejection sampling. */
function verificationCode(): string {
  let out = '';
  while (out.length < 8) for (const b of randomBytes(16)) if (b < 240 && out.length < 8) out += CODE_ALPHABET[b % 20];
  return `${out.slice(0, 4)}-${out.slice(4)}`;
}

const sameHash = (a: string, b: string) => a.length === b.length && timingSafeEqual(Buffer.from(a), Buffer.from(b));

/** What a client sees: past its expiry a login is `expired` (but a consumed one stays consumed); denied is expired. */
export function statusOf(doc: CliLoginDoc, nowMs: number): 'pending' | 'approved' | 'expired' | 'consumed' {
  if (doc.status === 'consumed') return 'consumed';
  if (doc.status === 'denied' || nowMs >= doc.expiresAtMs) return 'expired';
  return doc.status;
}

export function cliLoginHandlers(deps: IdentityDeps, now: () => number = Date.now) {
  const col = deps.store.collection(cliLogins);

  async function loginOf(loginId: string): Promise<CliLoginDoc> {
    const doc = /^cli_[0-9A-Za-z]{20,64}$/.test(loginId) ? await col.get(loginId) : null;
    if (!doc) throw errors.notFound('cli_login', loginId);
    return doc;
  }

  return {
    async startCliLogin(req: identityV1.StartCliLoginRequest): Promise<identityV1.StartCliLoginResponse> {
      const problems = [];
      if (!/^[0-9a-f]{64}$/i.test(req.state)) problems.push({ field: 'state', message: 'must be 64 hex characters (32 random bytes)' });
      if (!/^[A-Za-z0-9_-]{43}$/.test(req.codeChallenge))
        problems.push({ field: 'codeChallenge', message: 'must be the base64url SHA-256 of the code verifier (43 characters)' });
      if (req.codeChallengeMethod !== 'S256') problems.push({ field: 'codeChallengeMethod', message: 'must be S256' });
      if (!req.cliVersion || req.cliVersion.length > 50) problems.push({ field: 'cliVersion', message: 'must be 1 to 50 characters' });
      if (!req.platform || req.platform.length > 100) problems.push({ field: 'platform', message: 'must be 1 to 100 characters' });
      if (problems.length) throw errors.validation(problems);
      const at = now();
      const doc: CliLoginDoc = {
        id: `cli_${randomBase62(32)}`, // ~190 random bits
        stateHash: sha256Hex(req.state.toLowerCase()),
        codeChallenge: req.codeChallenge,
        verificationCode: verificationCode(),
        cliVersion: req.cliVersion,
        platform: req.platform,
        status: 'pending',
        expiresAtMs: at + CLI_LOGIN_TTL_MS,
        userId: null,
        tenantId: null,
        createdAt: new Date(at).toISOString(),
      };
      await col.insert(doc);
      return {
        loginId: doc.id,
        verificationCode: doc.verificationCode,
        expiresAt: new Date(doc.expiresAtMs).toISOString(),
        interval: CLI_POLL_INTERVAL_S,
      };
    },

    async getCliLogin(req: identityV1.GetCliLoginRequest): Promise<identityV1.GetCliLoginResponse> {
      const doc = await loginOf(req.loginId);
      return {
        status: statusOf(doc, now()),
        verificationCode: doc.verificationCode,
        cliVersion: doc.cliVersion,
        platform: doc.platform,
        expiresAt: new Date(doc.expiresAtMs).toISOString(),
      };
    },

    async decideCliLogin(req: identityV1.DecideCliLoginRequest, ctx: CallContext): Promise<identityV1.DecideCliLoginResponse> {
      requireAuth(ctx);
      if (ctx.auth.typ !== 'user')
        throw errors.forbidden('Only a signed-in user can approve a CLI login', { reason: 'user_session_required' });
      const doc = await loginOf(req.loginId);
      // The state is checked first (CONTRACT.md 4), in constant time.
      if (!sameHash(sha256Hex(req.state.toLowerCase()), doc.stateHash))
        throw errors.badRequest('invalid_state', 'The state does not match this login');
      if (statusOf(doc, now()) !== 'pending') throw errors.conflict('This login is no longer pending', { status: statusOf(doc, now()) });
      const patch: Partial<CliLoginDoc> = req.approve
        ? { status: 'approved', userId: ctx.auth.sub, tenantId: ctx.auth.tid }
        : { status: 'denied' };
      const auth = ctx.auth;
      const done = await deps.store.transaction(async (tx) => {
        const next = await tx.collection(cliLogins).update(doc.id, { status: 'pending' }, patch);
        if (next)
          await auditChange(
            tx,
            ctx,
            auth.tid,
            req.approve ? 'cli_login.approved' : 'cli_login.denied',
            { type: 'cli_login', id: doc.id },
            {
              before: { status: 'pending' },
              after: { status: next.status, cliVersion: doc.cliVersion, platform: doc.platform },
            },
          );
        return next;
      });
      if (done) deps.audit.kick();
      if (!done) throw errors.conflict('This login is no longer pending', { status: statusOf((await col.get(doc.id)) ?? doc, now()) });
      return { status: statusOf(done, now()) };
    },

    async exchangeCliLogin(req: identityV1.ExchangeCliLoginRequest): Promise<identityV1.ExchangeCliLoginResponse> {
      const doc = await loginOf(req.loginId);
      const status = statusOf(doc, now());
      if (status === 'expired' || status === 'consumed') throw errors.conflict(`This login is ${status}`, { status });
      const challenge = createHash('sha256').update(req.codeVerifier).digest('base64url');
      if (!/^[A-Za-z0-9._~-]{43,128}$/.test(req.codeVerifier) || !sameHash(challenge, doc.codeChallenge))
        throw errors.badRequest('invalid_code_verifier', 'The code verifier does not match this login');
      if (status === 'pending') throw errors.badRequest('authorization_pending', 'The login has not been approved yet');
      // Compare-and-set: of concurrent exchanges exactly one moves it from approved to consumed.
      const result = await deps.store.transaction(async (tx) => {
        const won = await tx.collection(cliLogins).update(doc.id, { status: 'approved' }, { status: 'consumed' });
        if (!won) return null;
        const user = await tx.collection(users).get(won.userId!, { tenantId: won.tenantId! });
        const tenant = await tx.collection(tenants).get(won.tenantId!);
        if (!user || !tenant || user.disabled) throw errors.unauthorized('The approving user can no longer sign in');
        const { tokens } = await startSession(deps, tx, user, 'cli');
        return { user, tenant, tokens };
      });
      if (!result) throw errors.conflict('This login was already used', { status: 'consumed' });
      return { user: toUser(result.user), tenant: toTenant(result.tenant), role: result.user.role, tokens: result.tokens };
    },
  };
}
