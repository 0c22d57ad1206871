import { type CallContext, errors, idempotent, newId, nowIso, randomBase62, sha256Hex } from '@svc/kit';
import { API_KEY_ENVIRONMENTS, API_KEY_TYPES, type ApiKeyType, SCOPES } from '@svc/contracts';
import type { identityV1 } from '@svc/proto';
import { apiKeys, users, type ApiKeyDoc } from '../collections';
import { identityCaps } from '../caps';
import type { IdentityDeps } from '../context';
import { recordRevocation } from '../revocations';
import { checkLimits, mergeLimits, toLimits } from '../key-limits';
import { Checks } from '../validate';
import { requireAuth } from './auth';
import { requireManager } from './team';
import { toApiKey } from '../views';
import { auditChange } from '../audit/log';

/**
 * Keys are managed by an owner or admin from a person's session (signed in on the web or through the CLI login),
 * never with another key, nor with a token limited to scopes (a delegated token of background work).
 */
function requireKeyManager(ctx: CallContext) {
  requireAuth(ctx);
  if (ctx.auth.typ === 'api_key' || ctx.auth.scp !== undefined)
    throw errors.forbidden('API keys are managed from a user session', { reason: 'user_session_required' });
  requireManager(ctx);
  return ctx.auth;
}

/** The longest a rotated-out secret stays valid (CONTRACT.md 8). */
export const MAX_GRACE_S = 86_400;

export function apiKeyHandlers(deps: IdentityDeps) {
  const col = deps.store.collection(apiKeys);
  const cap = identityCaps(deps.store, deps.settings).apiKeys;

  return {
    async createApiKey(req: identityV1.CreateApiKeyRequest, ctx: CallContext): Promise<identityV1.CreateApiKeyResponse> {
      const auth = requireKeyManager(ctx);
      const c = new Checks();
      const name = c.text('name', req.name, 1, 100);
      const type = c.oneOf('type', req.type, Object.keys(API_KEY_TYPES) as ApiKeyType[]);
      const environment = c.oneOf('environment', req.environment, API_KEY_ENVIRONMENTS);
      const scopes = [...new Set(req.scopes)];
      for (const s of scopes) if (!(SCOPES as readonly string[]).includes(s)) c.fail('scopes', `unknown scope: ${s.slice(0, 50)}`);
      let expiresAt: string | null = null;
      if (req.expiresAt !== undefined) {
        const t = Date.parse(req.expiresAt);
        if (Number.isNaN(t)) c.fail('expiresAt', 'must be an ISO 8601 timestamp');
        else if (t <= Date.now()) c.fail('expiresAt', 'must be in the future');
        else expiresAt = new Date(t).toISOString();
      }
      const limits = checkLimits(c, req.limits);
      c.done();
      if (deps.settings.accounts.requireVerifiedEmail && (await deps.store.collection(users).get(auth.sub))?.emailVerified === false)
        throw errors.forbidden('Verify your email address first (see the email sent at sign-up)', { reason: 'email_not_verified' });
      const key = API_KEY_TYPES[type] + randomBase62(43);
      const doc: ApiKeyDoc = {
        id: newId('key'),
        tenantId: auth.tid,
        createdBy: auth.sub,
        name,
        type,
        environment,
        scopes,
        scoped: req.scoped,
        start: key.slice(0, 12),
        hash: sha256Hex(key),
        createdAt: nowIso(),
        lastUsedAt: null,
        expiresAt,
        revokedAt: null,
        limits,
      };
      // Each key is its own rate-limit principal (CONTRACT.md 6): the cap bounds how far one tenant can multiply
      // its budget.
      // Once per Idempotency-Key, the key and the answer in one transaction; the answer (it holds the key) sealed.
      const scope = { tenantId: auth.tid, operation: 'createApiKey', key: ctx.idempotencyKey, body: req };
      const answer = await idempotent<identityV1.CreateApiKeyResponse>(
        deps.store,
        scope,
        (commit) =>
          commit(
            async (tx) => {
              await cap.places(tx, auth.tid).take();
              await tx.collection(apiKeys).insert(doc);
              await auditChange(tx, ctx, auth.tid, 'api_key.created', { type: 'api_key', id: doc.id }, { after: keyAudit(doc) });
              return { apiKey: toApiKey(doc), key };
            },
            (body) => cap.transaction(auth.tid, (tx) => body(tx)),
          ),
        { seal: deps.box },
      );
      deps.audit.kick();
      return answer;
    },

    async listApiKeys(req: identityV1.ListApiKeysRequest, ctx: CallContext): Promise<identityV1.ListApiKeysResponse> {
      const auth = requireKeyManager(ctx);
      const page = await col.find({ tenantId: auth.tid, revokedAt: null }, { limit: req.limit || 20, cursor: req.cursor || null });
      return { apiKeys: page.items.map(toApiKey), nextCursor: page.nextCursor ?? '' };
    },

    async getApiKey(req: identityV1.GetApiKeyRequest, ctx: CallContext): Promise<identityV1.GetApiKeyResponse> {
      const auth = requireKeyManager(ctx);
      const doc = await col.get(req.id, { tenantId: auth.tid, revokedAt: null });
      if (!doc) throw errors.notFound('api_key', req.id);
      return { apiKey: toApiKey(doc) };
    },

    async revokeApiKey(req: identityV1.RevokeApiKeyRequest, ctx: CallContext): Promise<identityV1.RevokeApiKeyResponse> {
      const auth = requireKeyManager(ctx);
      const revoked = await cap.transaction(auth.tid, async (tx, places) => {
        const doc = await tx.collection(apiKeys).update(req.id, { tenantId: auth.tid, revokedAt: null }, { revokedAt: nowIso() });
        if (!doc) return null;
        await places.free();
        await recordRevocation(tx, 'api_key', doc.id);
        await auditChange(
          tx,
          ctx,
          auth.tid,
          'api_key.revoked',
          { type: 'api_key', id: doc.id },
          {
            before: { revokedAt: null },
            after: { revokedAt: doc.revokedAt },
          },
        );
        return doc;
      });
      if (!revoked) throw errors.notFound('api_key', req.id);
      deps.audit.kick();
      deps.announceRevocation();
      return { apiKey: toApiKey(revoked) };
    },

    /**
     * The limits of the caller's own key, as stored now: billing reads the credit budget here at each reservation, so
     * a PATCH counts from its commit, also for background work holding an older (delegated) token of the key.
     */
    async getCallerKeyLimits(_req: identityV1.GetCallerKeyLimitsRequest, ctx: CallContext): Promise<identityV1.GetCallerKeyLimitsResponse> {
      requireAuth(ctx);
      const auth = ctx.auth;
      if (auth.typ !== 'api_key') return {};
      const doc = await col.get(auth.sid, { tenantId: auth.tid, revokedAt: null });
      return doc ? { limits: toLimits(doc.limits) } : {};
    },

    /**
     * Name and limits; `limits` merges field by field. Gateways drop their cached principals of the key when the
     * feed entry reaches them (within a second), so the next request carries the new limits.
     */
    async updateApiKey(req: identityV1.UpdateApiKeyRequest, ctx: CallContext): Promise<identityV1.UpdateApiKeyResponse> {
      const auth = requireKeyManager(ctx);
      for (;;) {
        const current = await col.get(req.id, { tenantId: auth.tid, revokedAt: null });
        if (!current) throw errors.notFound('api_key', req.id);
        const c = new Checks();
        const name = req.name === undefined ? undefined : c.text('name', req.name, 1, 100);
        const limits = mergeLimits(c, current.limits ?? {}, req.limits);
        c.done();
        // Merged from what was read, written only if no other change came between (else merged again).
        const updated = await deps.store.transaction(async (tx) => {
          const doc = await tx.collection(apiKeys).get(req.id, { tenantId: auth.tid, revokedAt: null });
          if (!doc) return null;
          if (JSON.stringify(doc.limits ?? {}) !== JSON.stringify(current.limits ?? {})) return 'changed' as const;
          const next = await tx.collection(apiKeys).update(doc.id, { tenantId: auth.tid, revokedAt: null }, { name, limits });
          await recordRevocation(tx, 'api_key_changed', doc.id);
          if (next) {
            const before: Record<string, unknown> = {};
            const after: Record<string, unknown> = {};
            if (next.name !== doc.name) [before.name, after.name] = [doc.name, next.name];
            before.limits = doc.limits ?? {};
            after.limits = next.limits ?? {};
            await auditChange(tx, ctx, auth.tid, 'api_key.limits_changed', { type: 'api_key', id: doc.id }, { before, after });
          }
          return next;
        });
        if (updated === 'changed') continue;
        if (!updated) throw errors.notFound('api_key', req.id);
        deps.audit.kick();
        deps.announceRevocation();
        return { apiKey: toApiKey(updated) };
      }
    },

    /**
     * A new secret for the key. The old one is kept (its hash) until `previousValidUntil`, on identity's clock:
     * identity alone decides whether it is still valid when it is presented, and tells the gateway for how long it may
     * keep the answer (relative milliseconds, Principal.valid_for_ms), so no two machines' clocks are compared.
     * A rotation during an earlier grace period ends that one: only the secret just replaced stays valid.
     */
    async rotateApiKey(req: identityV1.RotateApiKeyRequest, ctx: CallContext): Promise<identityV1.RotateApiKeyResponse> {
      const auth = requireKeyManager(ctx);
      const grace = req.gracePeriodSeconds;
      if (!Number.isInteger(grace) || grace < 0 || grace > MAX_GRACE_S)
        throw errors.validation([{ field: 'gracePeriodSeconds', message: `must be an integer from 0 to ${MAX_GRACE_S}` }]);
      const existing = await col.get(req.id, { tenantId: auth.tid, revokedAt: null });
      if (!existing) throw errors.notFound('api_key', req.id);
      const key = API_KEY_TYPES[existing.type as ApiKeyType] + randomBase62(43);
      const rotated = await deps.store.transaction(async (tx) => {
        const doc = await tx.collection(apiKeys).get(req.id, { tenantId: auth.tid, revokedAt: null });
        if (!doc) return null;
        const next = await tx.collection(apiKeys).update(
          doc.id,
          { tenantId: auth.tid, revokedAt: null, hash: doc.hash },
          {
            hash: sha256Hex(key),
            start: key.slice(0, 12),
            previousHash: grace > 0 ? doc.hash : null,
            previousValidUntil: grace > 0 ? new Date(Date.now() + grace * 1000).toISOString() : null,
          },
        );
        // Cached principals of either secret are dropped everywhere: the old one is then asked about afresh.
        if (next) {
          await recordRevocation(tx, 'api_key_changed', doc.id);
          await auditChange(
            tx,
            ctx,
            auth.tid,
            'api_key.rotated',
            { type: 'api_key', id: doc.id },
            {
              before: { start: doc.start },
              after: { start: next.start, gracePeriodSeconds: grace, previousValidUntil: next.previousValidUntil ?? null },
            },
          );
        }
        return next;
      });
      if (!rotated) throw errors.notFound('api_key', req.id);
      deps.audit.kick();
      deps.announceRevocation();
      return { apiKey: toApiKey(rotated), key };
    },
  };
}

/** What the audit log shows of a key: never its secret or hash. */
function keyAudit(doc: ApiKeyDoc) {
  return {
    name: doc.name,
    type: doc.type,
    environment: doc.environment,
    scopes: doc.scopes,
    scoped: doc.scoped,
    start: doc.start,
    expiresAt: doc.expiresAt,
    limits: doc.limits ?? {},
  };
}
