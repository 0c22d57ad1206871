import { type Store, TenantCap } from '@svc/kit';
import { apiKeys, invitations, models, secrets, users } from './collections';
import type { IdentitySettings } from './context';

/**
 * The tenant caps identity keeps, exact across replicas (kit caps): every write that adds to or takes from what one
 * counts goes through it. Registration is the exception: it makes a new tenant, whose counters start from a count.
 */
export function identityCaps(store: Store, settings: IdentitySettings) {
  return {
    /** Members and pending invitations: an invitation holds its invitee's place (its acceptance moves nothing). */
    members: new TenantCap(store, {
      kind: 'member',
      plural: 'members',
      free: 'remove one or revoke an invitation',
      limit: settings.maxMembersPerTenant,
      count: async (tx, tenantId) =>
        (await tx.collection(users).count({ tenantId })) + (await tx.collection(invitations).count({ tenantId, status: 'pending' })),
    }),
    /** Live keys: a revoke frees a place. */
    apiKeys: new TenantCap(store, {
      kind: 'api_key',
      plural: 'API keys',
      free: 'revoke',
      limit: settings.maxApiKeysPerTenant,
      count: (tx, tenantId) => tx.collection(apiKeys).count({ tenantId, revokedAt: null }),
    }),
    secrets: new TenantCap(store, {
      kind: 'secret',
      plural: 'secrets',
      limit: settings.maxSecretsPerTenant,
      count: (tx, tenantId) => tx.collection(secrets).count({ tenantId }),
    }),
    /** Catalogue entries (MODELS_PER_TENANT). */
    models: new TenantCap(store, {
      kind: 'model',
      plural: 'models',
      limit: settings.maxModelsPerTenant,
      count: (tx, tenantId) => tx.collection(models).count({ tenantId }),
    }),
  };
}
