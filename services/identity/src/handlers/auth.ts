import {
  addToOutbox,
  type AuthedContext,
  type CallContext,
  DuplicateKeyError,
  readFeed,
  errors,
  newId,
  nowIso,
  sha256Hex,
  type StoreSession,
} from '@svc/kit';
import { domainEvent, TOPICS, SCOPES, SESSION_COOKIE_PREFIX } from '@svc/contracts';
import type { identityV1 } from '@svc/proto';
import { apiKeys, revocations, sessions, tenants, users, refreshTokens, type TenantDoc, type UserDoc } from '../collections';
import type { IdentityDeps } from '../context';
import { burnPasswordCheck, hashPassword, verifyPassword } from '../passwords';
import { recordRevocation } from '../revocations';
import { apiKeyClaims, issueRefreshToken, signAccessToken, startSession, userClaims } from '../tokens';
import { Checks } from '../validate';
import { toLimits } from '../key-limits';
import { toTenant, toUser } from '../views';
import { auditChange, recordAudit } from '../audit/log';
import { countSignInFailure, forgetSignInFailures } from '../audit/sign-in-failures';
import { queueVerification } from './account-links';

export function requireAuth(ctx: CallContext): asserts ctx is AuthedContext {
  if (!ctx.auth || !ctx.token) throw errors.unauthorized();
}

export async function loadUserAndTenant(tx: StoreSession, userId: string, tenantId: string): Promise<{ user: UserDoc; tenant: TenantDoc }> {
  const user = await tx.collection(users).get(userId, { tenantId });
  const tenant = await tx.collection(tenants).get(tenantId);
  if (!user || !tenant) throw errors.unauthorized('Credential no longer valid');
  return { user, tenant };
}

/** Emits user.created for a new user, in the caller's transaction. */
export async function userCreated(tx: StoreSession, user: UserDoc): Promise<void> {
  await addToOutbox(
    tx,
    domainEvent(TOPICS.identity, 'user.created', user.tenantId, {
      $case: 'user',
      value: { id: user.id, email: user.email, name: user.name, role: user.role, createdAt: user.createdAt },
    }),
  );
}

/** A new user's document (not stored yet). */
export function newUser(f: Pick<UserDoc, 'tenantId' | 'email' | 'name' | 'role' | 'passwordHash' | 'emailVerified'>): UserDoc {
  const now = nowIso();
  return { id: newId('usr'), ...f, disabled: false, createdAt: now, updatedAt: now };
}

/** The documents of a new tenant and its owner (not stored yet). */
export function ownerOfNewTenant(f: { email: string; name: string; tenantName: string; passwordHash: string }): {
  tenant: TenantDoc;
  user: UserDoc;
} {
  const now = nowIso();
  const tenant: TenantDoc = { id: newId('ten'), name: f.tenantName, plan: 'free', ipAllowlist: [], createdAt: now, updatedAt: now };
  const user = newUser({ tenantId: tenant.id, email: f.email, name: f.name, role: 'owner', passwordHash: f.passwordHash });
  return { tenant, user };
}

/** Stores a new tenant and its owner and announces both (`tenant.created`, `user.created`), in the caller's transaction. */
export async function createTenantWithOwner(tx: StoreSession, tenant: TenantDoc, user: UserDoc): Promise<void> {
  await tx.collection(tenants).insert(tenant);
  await tx.collection(users).insert(user);
  await addToOutbox(
    tx,
    domainEvent(TOPICS.identity, 'tenant.created', tenant.id, {
      $case: 'tenant',
      value: { id: tenant.id, name: tenant.name, plan: tenant.plan, createdAt: tenant.createdAt },
    }),
  );
  await userCreated(tx, user);
}

/** `session.signed_in` for a new session, in its transaction. */
export function signedIn(tx: StoreSession, ctx: CallContext, user: UserDoc, sessionId: string, method: string): Promise<void> {
  return recordAudit(
    tx,
    ctx,
    { tenantId: user.tenantId, action: 'session.signed_in', target: { type: 'session', id: sessionId }, changes: { after: { method } } },
    { type: 'user', id: user.id, email: user.email },
  );
}

export function authHandlers(deps: IdentityDeps) {
  const { store } = deps;

  return {
    async register(req: identityV1.RegisterRequest): Promise<identityV1.RegisterResponse> {
      const c = new Checks();
      const email = c.email('email', req.email);
      const password = c.password('password', req.password);
      const name = c.text('name', req.name, 1, 200);
      const tenantName = c.text('tenantName', req.tenantName, 1, 200);
      c.done();
      const passwordHash = await hashPassword(password);
      const { tenant, user } = ownerOfNewTenant({ email, name, tenantName, passwordHash });
      user.emailVerified = false;
      try {
        const out = await store.transaction(async (tx) => {
          await createTenantWithOwner(tx, tenant, user);
          await queueVerification(tx, deps, user);
          return startSession(deps, tx, user);
        });
        deps.relay.notify();
        deps.mail.notify();
        return { user: toUser(user), tenant: toTenant(tenant), role: user.role, tokens: out.tokens };
      } catch (err) {
        if (err instanceof DuplicateKeyError) throw errors.conflict('Email is already registered', { field: 'email' });
        throw err;
      }
    },

    async login(req: identityV1.LoginRequest, ctx: CallContext): Promise<identityV1.LoginResponse> {
      const email = req.email.trim().toLowerCase();
      // Counted before any hashing: a throttled attempt costs nothing (login-guard.ts).
      const forgive = deps.loginThrottle.begin(email, ctx.clientIp);
      const user = email ? await store.collection(users).findOne({ email }) : null;
      if (!user) {
        await burnPasswordCheck(req.password, ctx.clientIp ?? '');
        throw errors.unauthorized('Invalid email or password');
      }
      if (!(await verifyPassword(req.password, user.passwordHash, ctx.clientIp ?? ''))) {
        if (await countSignInFailure(store, ctx, user)) deps.audit.kick();
        throw errors.unauthorized('Invalid email or password');
      }
      forgive();
      if (user.disabled) throw errors.forbidden('Account is disabled', { reason: 'account_disabled' });
      const tenant = await store.collection(tenants).get(user.tenantId);
      if (!tenant) throw errors.unauthorized('Invalid email or password');
      const { tokens } = await store.transaction(async (tx) => {
        const started = await startSession(deps, tx, user);
        await signedIn(tx, ctx, user, started.session.id, 'password');
        await forgetSignInFailures(tx, user.id);
        return started;
      });
      deps.audit.kick();
      return { user: toUser(user), tenant: toTenant(tenant), role: user.role, tokens };
    },

    async refresh(req: identityV1.RefreshRequest, ctx: CallContext): Promise<identityV1.RefreshResponse> {
      const id = sha256Hex(req.refreshToken);
      const result = await store.transaction(async (tx) => {
        const token = await tx.collection(refreshTokens).get(id);
        if (!token || token.expiresAt < nowIso()) return { error: 'invalid' as const };
        const session = await tx.collection(sessions).get(token.sessionId);
        if (!session || session.revokedAt || session.expiresAt < nowIso()) return { error: 'invalid' as const };
        // Compare-and-set: of two uses of one token, only the first rotates it; the second is reuse.
        const used = await tx.collection(refreshTokens).update(id, { usedAt: null }, { usedAt: nowIso() });
        if (!used) {
          await tx.collection(sessions).update(session.id, { revokedAt: null }, { revokedAt: nowIso() });
          await recordRevocation(tx, 'session', session.id);
          await recordAudit(
            tx,
            ctx,
            {
              tenantId: session.tenantId,
              action: 'session.refresh_reuse_detected',
              target: { type: 'session', id: session.id },
              changes: { before: { revokedAt: null, userId: session.userId }, after: { revokedAt: nowIso(), userId: session.userId } },
            },
            { type: 'system', id: 'identity' },
          );
          return { error: 'reuse' as const };
        }
        const { user, tenant } = await loadUserAndTenant(tx, session.userId, session.tenantId);
        if (user.disabled) return { error: 'invalid' as const };
        const refreshToken = await issueRefreshToken(deps, tx, session);
        const accessToken = await signAccessToken(deps, userClaims(user, session), deps.settings.accessTokenTtlS, tx);
        return { user, tenant, tokens: { accessToken, refreshToken, expiresIn: deps.settings.accessTokenTtlS, sessionToken: '' } };
      });
      if ('error' in result) {
        if (result.error === 'reuse') {
          deps.audit.kick();
          deps.announceRevocation();
          deps.logger.warn({ event: 'refresh_token_reuse' }, 'refresh token reused; session revoked');
        }
        throw errors.unauthorized('Refresh token is not valid');
      }
      return { user: toUser(result.user), tenant: toTenant(result.tenant), role: result.user.role, tokens: result.tokens };
    },

    async logout(_req: identityV1.LogoutRequest, ctx: CallContext): Promise<identityV1.LogoutResponse> {
      requireAuth(ctx);
      if (ctx.auth.typ === 'api_key')
        throw errors.badRequest('not_a_session', 'API keys are not sessions: revoke a key with DELETE /api-keys/:id');
      await store.transaction(async (tx) => {
        const ended = await tx
          .collection(sessions)
          .update(ctx.auth.sid, { tenantId: ctx.auth.tid, revokedAt: null }, { revokedAt: nowIso() });
        await recordRevocation(tx, 'session', ctx.auth.sid);
        if (ended)
          await auditChange(
            tx,
            ctx,
            ctx.auth.tid,
            'session.signed_out',
            { type: 'session', id: ctx.auth.sid },
            {
              before: { revokedAt: null },
              after: { revokedAt: ended.revokedAt },
            },
          );
      });
      deps.audit.kick();
      deps.announceRevocation();
      return {};
    },

    async getMe(_req: identityV1.GetMeRequest, ctx: CallContext): Promise<identityV1.GetMeResponse> {
      requireAuth(ctx);
      const { user, tenant } = await loadUserAndTenant(store, ctx.auth.sub, ctx.auth.tid);
      const a = ctx.auth;
      return {
        user: toUser(user),
        tenant: toTenant(tenant),
        role: user.role,
        credential: { type: a.typ, id: a.sid, environment: a.env, scopes: a.scp ?? [], scoped: a.scp !== undefined },
      };
    },

    async getTenant(_req: identityV1.GetTenantRequest, ctx: CallContext): Promise<identityV1.GetTenantResponse> {
      requireAuth(ctx);
      const tenant = await store.collection(tenants).get(ctx.auth.tid);
      if (!tenant) throw errors.notFound('tenant', ctx.auth.tid);
      return { tenant: toTenant(tenant) };
    },

    /** Resolves an API key or session cookie for the gateway, which caches the answer. */
    async authenticate(req: identityV1.AuthenticateRequest): Promise<identityV1.AuthenticateResponse> {
      const credential = req.credential;
      if (credential.length < 20 || credential.length > 200) throw errors.unauthorized('Credential is not valid');
      const hash = sha256Hex(credential);
      const now = nowIso();
      const ttl = deps.settings.serviceTokenTtlS;
      if (credential.startsWith(SESSION_COOKIE_PREFIX)) {
        const session = await store.collection(sessions).findOne({ cookieHash: hash });
        if (!session || session.revokedAt || session.expiresAt < now) throw errors.unauthorized('Session is not valid');
        const { user, tenant } = await loadUserAndTenant(store, session.userId, session.tenantId);
        if (user.disabled) throw errors.unauthorized('Session is not valid');
        const token = await signAccessToken(deps, userClaims(user, session), ttl);
        return {
          principal: {
            tenantId: tenant.id,
            userId: user.id,
            type: 'user',
            credentialId: session.id,
            sessionId: session.id,
            role: user.role,
            scopes: [],
            scoped: false,
            ipAllowlist: tenant.ipAllowlist,
            serviceToken: token,
            serviceTokenExpiresAt: Math.min(Date.now() + ttl * 1000, Date.parse(session.expiresAt)),
            emailUnverified: user.emailVerified === false,
          },
        };
      }
      // The key's current secret, else a rotated-out one still in its grace period (decided on this clock only).
      const current = await store.collection(apiKeys).findOne({ hash });
      const key = current ?? (await store.collection(apiKeys).findOne({ previousHash: hash }));
      const graceLeftMs = current || !key?.previousValidUntil ? null : Date.parse(key.previousValidUntil) - Date.now();
      if (!key || key.revokedAt || (key.expiresAt && key.expiresAt < now) || (graceLeftMs !== null && graceLeftMs <= 0))
        throw errors.unauthorized('API key is not valid');
      const creator = await store.collection(users).get(key.createdBy, { tenantId: key.tenantId });
      const tenant = await store.collection(tenants).get(key.tenantId);
      if (!creator || !tenant || creator.disabled) throw errors.unauthorized('API key is not valid');
      // lastUsedAt is advisory: written at most once a minute per key, never blocking the answer.
      if (!key.lastUsedAt || Date.parse(key.lastUsedAt) < Date.now() - 60_000)
        void store
          .collection(apiKeys)
          .update(key.id, {}, { lastUsedAt: now })
          .catch(() => undefined);
      const token = await signAccessToken(deps, apiKeyClaims(key, creator), ttl);
      const expiry = key.expiresAt ? Math.min(Date.now() + ttl * 1000, Date.parse(key.expiresAt)) : Date.now() + ttl * 1000;
      return {
        principal: {
          tenantId: tenant.id,
          userId: creator.id,
          type: 'api_key',
          credentialId: key.id,
          sessionId: key.id,
          role: creator.role,
          scopes: key.scopes,
          scoped: key.scoped,
          environment: key.environment,
          ipAllowlist: tenant.ipAllowlist,
          serviceToken: token,
          serviceTokenExpiresAt: expiry,
          limits: toLimits(key.limits),
          validForMs: graceLeftMs ?? undefined,
          emailUnverified: creator.emailVerified === false,
        },
      };
    },

    async delegateToken(req: identityV1.DelegateTokenRequest, ctx: CallContext): Promise<identityV1.DelegateTokenResponse> {
      requireAuth(ctx);
      const unknown = req.scopes.filter((s) => !(SCOPES as readonly string[]).includes(s));
      if (unknown.length || !req.scopes.length)
        throw errors.validation([{ field: 'scopes', message: 'must be a non-empty list of known scopes' }]);
      const ttl = Math.min(Math.max(req.ttlSeconds || 900, 60), 3600);
      const a = ctx.auth;
      // Never more than the caller has: a scoped caller's delegate keeps only the scopes both lists share.
      const scopes = a.scp ? req.scopes.filter((s) => a.scp!.includes(s)) : req.scopes;
      const token = await signAccessToken(
        deps,
        { sub: a.sub, tid: a.tid, typ: a.typ, role: a.role, sid: a.sid, scp: scopes, ...(a.env ? { env: a.env } : {}) },
        ttl,
      );
      return { token, expiresAt: Date.now() + ttl * 1000 };
    },

    async getJwks(): Promise<identityV1.GetJwksResponse> {
      return { jwksJson: JSON.stringify(await deps.keys.getJwks()) };
    },

    async listRevocations(req: identityV1.ListRevocationsRequest): Promise<identityV1.ListRevocationsResponse> {
      const { entries, lastSeq } = await readFeed(store, revocations, req.afterSeq, req.limit);
      return { revocations: entries, lastSeq };
    },
  };
}
