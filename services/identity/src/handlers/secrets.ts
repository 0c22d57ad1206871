/**
 * Secrets (CONTRACT.md 5): a tenant's named values, sealed at rest with the master key (kit SecretBox: AES-256-GCM
 * with the key id in each ciphertext, so SVC_MASTER_KEY rotates without downtime: older ids stay readable, new
 * writes use the newest key). The value never leaves through the public RPCs, nor through logs (the kit's logger
 * redacts `value`) or errors; only ResolveSecret, for services, returns it.
 */
import { auditChange } from '../audit/log';
import { type CallContext, DuplicateKeyError, errors, newId, nowIso } from '@svc/kit';
import { authed } from '@svc/contracts';
import type { identityV1 } from '@svc/proto';
import { secrets, type SecretDoc } from '../collections';
import { identityCaps } from '../caps';
import type { IdentityDeps } from '../context';
import { Checks } from '../validate';
import { toSecret } from '../views';

/** Like an environment variable name: a letter or underscore, then letters, digits and underscores; 1-128. */
export const SECRET_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
export const MAX_SECRET_VALUE = 65_536;
const MAX_DESCRIPTION = 500;
const UPDATE_ATTEMPTS = 5;

function checkName(c: Checks, name: string): void {
  if (!SECRET_NAME.test(name)) c.fail('name', 'must be 1-128 characters: letters, digits and _, not starting with a digit');
}

function checkValue(c: Checks, value: string): void {
  if (value.length < 1 || value.length > MAX_SECRET_VALUE) c.fail('value', `must be 1 to ${MAX_SECRET_VALUE} characters`);
}

export function secretHandlers(deps: IdentityDeps) {
  const col = deps.store.collection(secrets);
  const cap = identityCaps(deps.store, deps.settings).secrets;

  /** The caller's secret by name; a name that is not valid names nothing (404, like another tenant's). */
  async function find(tenantId: string, name: string): Promise<SecretDoc> {
    const doc = SECRET_NAME.test(name) ? await col.findOne({ tenantId, name }) : null;
    if (!doc) throw errors.notFound('secret', name);
    return doc;
  }

  return {
    async createSecret(req: identityV1.CreateSecretRequest, ctx: CallContext): Promise<identityV1.CreateSecretResponse> {
      const { auth } = authed(ctx, 'secrets:write');
      const c = new Checks();
      checkName(c, req.name);
      checkValue(c, req.value);
      if (req.description.length > MAX_DESCRIPTION) c.fail('description', `must be at most ${MAX_DESCRIPTION} characters`);
      c.done();
      const now = nowIso();
      const doc: SecretDoc = {
        id: newId('sec'),
        tenantId: auth.tid,
        name: req.name,
        description: req.description,
        version: 1,
        valueSealed: deps.box.encrypt(req.value),
        createdAt: now,
        updatedAt: now,
      };
      try {
        await cap.transaction(auth.tid, async (tx, places) => {
          await places.take();
          await tx.collection(secrets).insert(doc);
          await auditChange(
            tx,
            ctx,
            auth.tid,
            'secret.created',
            { type: 'secret', id: doc.name },
            {
              after: { name: doc.name, description: doc.description, version: 1 },
            },
          );
        });
      } catch (err) {
        if (err instanceof DuplicateKeyError) throw errors.conflict(`A secret named ${req.name} exists`, { name: req.name });
        throw err;
      }
      deps.audit.kick();
      return { secret: toSecret(doc) };
    },

    async listSecrets(req: identityV1.ListSecretsRequest, ctx: CallContext): Promise<identityV1.ListSecretsResponse> {
      const { auth } = authed(ctx, 'secrets:read');
      const page = await col.find({ tenantId: auth.tid }, { limit: req.limit || 20, cursor: req.cursor || null });
      return { secrets: page.items.map(toSecret), nextCursor: page.nextCursor ?? '' };
    },

    async getSecret(req: identityV1.GetSecretRequest, ctx: CallContext): Promise<identityV1.GetSecretResponse> {
      const { auth } = authed(ctx, 'secrets:read');
      return { secret: toSecret(await find(auth.tid, req.name)) };
    },

    async updateSecret(req: identityV1.UpdateSecretRequest, ctx: CallContext): Promise<identityV1.UpdateSecretResponse> {
      const { auth } = authed(ctx, 'secrets:write');
      const c = new Checks();
      checkValue(c, req.value);
      c.done();
      const valueSealed = deps.box.encrypt(req.value);
      // Compare-and-set on the version: concurrent updates each get a version of their own, none is lost.
      for (let attempt = 0; attempt < UPDATE_ATTEMPTS; attempt++) {
        const doc = await find(auth.tid, req.name);
        const updated = await deps.store.transaction(async (tx) => {
          const next = await tx.collection(secrets).update(
            doc.id,
            { tenantId: auth.tid, version: doc.version },
            {
              version: doc.version + 1,
              valueSealed,
              updatedAt: nowIso(),
            },
          );
          if (next)
            await auditChange(
              tx,
              ctx,
              auth.tid,
              'secret.versioned',
              { type: 'secret', id: doc.name },
              {
                before: { name: doc.name, version: doc.version },
                after: { name: doc.name, version: next.version },
              },
            );
          return next;
        });
        if (updated) {
          deps.audit.kick();
          return { secret: toSecret(updated) };
        }
      }
      throw errors.conflict('The secret changed concurrently; try again', { name: req.name });
    },

    async deleteSecret(req: identityV1.DeleteSecretRequest, ctx: CallContext): Promise<identityV1.DeleteSecretResponse> {
      const { auth } = authed(ctx, 'secrets:write');
      const doc = await find(auth.tid, req.name);
      const deleted = await cap.transaction(auth.tid, async (tx, places) => {
        const ok = await tx.collection(secrets).delete(doc.id, { tenantId: auth.tid });
        if (ok) {
          await places.free();
          await auditChange(
            tx,
            ctx,
            auth.tid,
            'secret.deleted',
            { type: 'secret', id: doc.name },
            {
              before: { name: doc.name, version: doc.version },
            },
          );
        }
        return ok;
      });
      if (!deleted) throw errors.notFound('secret', req.name);
      deps.audit.kick();
      return { name: req.name };
    },

    async resolveSecret(req: identityV1.ResolveSecretRequest, ctx: CallContext): Promise<identityV1.ResolveSecretResponse> {
      const { auth } = authed(ctx, 'secrets:read');
      const doc = await find(auth.tid, req.name);
      return { name: doc.name, version: doc.version, value: deps.box.decrypt(doc.valueSealed) };
    },
  };
}
