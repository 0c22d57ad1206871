import {
  API_KEY_ENVIRONMENTS,
  API_KEY_TYPES,
  type ApiKeyType,
  type CallContext,
  errors,
  newId,
  nowIso,
  randomBase62,
  SCOPES,
  sha256Hex,
} from '@svc/kit';
import type { identityV1 } from '@svc/proto';
import { apiKeys, type ApiKeyDoc } from '../collections';
import { identityCaps } from '../caps';
import type { IdentityDeps } from '../context';
import { recordRevocation } from '../revocations';
import { Checks } from '../validate';
import { requireAuth } from './auth';
import { requireManager } from './team';
import { toApiKey } from './views';

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
      c.done();
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
      };
      // Each key is its own rate-limit principal (CONTRACT.md 6): the cap bounds how far one tenant can multiply
      // its budget.
      await cap.transaction(auth.tid, async (tx, places) => {
        await places.take();
        await tx.collection(apiKeys).insert(doc);
      });
      return { apiKey: toApiKey(doc), key };
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
        return doc;
      });
      if (!revoked) throw errors.notFound('api_key', req.id);
      deps.announceRevocation();
      return { apiKey: toApiKey(revoked) };
    },
  };
}
