import {
  type AuthedContext,
  AppError,
  type CallContext,
  checkUrlShape,
  DuplicateKeyError,
  EgressError,
  type EgressPolicy,
  errors,
  type FieldError,
  nowIso,
  type SecretBox,
  type Store,
} from '@svc/kit';
import { authed } from '@svc/contracts';
import { checkFeature, isFeatureKey } from '@svc/plans';
import type { regionsV1 } from '@svc/proto';
import { preferences, storageConfigs, type PreferencesDoc, type StorageDoc } from '../collections';
import { planOf } from '../plan-events';
import { applyPreferences, type Catalogue, defaultPreferences, placementProblems, type Prefs, requireFeature } from '../rules';
import { BYOS_PROVIDERS, type ByosProvider, type ByosTarget, validateByos } from '../storage-check';
import { toPreferences, toStorage } from '../views';

export interface RegionsDeps {
  store: Store;
  box: SecretBox;
  catalogue: Catalogue;
  policy: EgressPolicy;
  validateTimeoutMs: number;
}

/** Bucket (or container) names: the rules common to S3, R2, GCS and Azure, which are all stricter in some way. */
const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
const PROVIDER_REGION = /^[a-z0-9-]{1,64}$/;
/** Providers whose endpoint names the account, so there is no default. */
const ENDPOINT_REQUIRED: readonly string[] = ['r2', 'azure'];
const CAS_ATTEMPTS = 5;

/**
 * The path's `:tenantId` must be the caller's own (CONTRACT.md 3); another is 404, as if it did not exist. Every
 * route here needs a credential without a scope list; changes need the owner or admin role.
 */
function caller(ctx: CallContext, tenantId: string | undefined, manage = false): AuthedContext {
  const c = authed(ctx, 'unscoped');
  if (tenantId !== undefined && tenantId !== c.auth.tid) throw errors.notFound('tenant', tenantId);
  if (manage && c.auth.role !== 'owner' && c.auth.role !== 'admin')
    throw errors.forbidden('This needs the owner or admin role', { reason: 'role_required', requiredRole: 'admin' });
  return c;
}

function prefsOf(doc: PreferencesDoc | null, catalogue: Catalogue): Prefs {
  if (!doc) return defaultPreferences(catalogue.regions);
  const { primaryRegion, secondaryRegion, dataResidencyRequired, dataResidencyRegion, complianceLevel } = doc;
  return { primaryRegion, secondaryRegion, dataResidencyRequired, dataResidencyRegion, complianceLevel };
}

/** A complete BYOS target from the caller's input, every problem reported at once. Keys stay in memory only. */
function parseByos(input: regionsV1.StorageInput, policy: EgressPolicy): ByosTarget {
  const fields: FieldError[] = [];
  const need = (field: string, value: string) => {
    if (!value) fields.push({ field, message: 'is required when storageMode is byos' });
  };
  if (input.platformRegion) fields.push({ field: 'platformRegion', message: 'is only used when storageMode is platform' });
  need('byosProvider', input.byosProvider);
  if (input.byosProvider && !(BYOS_PROVIDERS as readonly string[]).includes(input.byosProvider))
    fields.push({ field: 'byosProvider', message: `must be one of: ${BYOS_PROVIDERS.join(', ')}` });
  need('byosBucket', input.byosBucket);
  if (input.byosBucket && !BUCKET.test(input.byosBucket))
    fields.push({ field: 'byosBucket', message: 'must be 3-63 characters: lower-case letters, digits, dots and hyphens' });
  need('byosAccessKey', input.byosAccessKey);
  need('byosSecretKey', input.byosSecretKey);
  if (input.byosRegion && !PROVIDER_REGION.test(input.byosRegion))
    fields.push({ field: 'byosRegion', message: 'must be 1-64 characters: lower-case letters, digits and hyphens' });
  if (ENDPOINT_REQUIRED.includes(input.byosProvider) && !input.byosEndpoint)
    fields.push({ field: 'byosEndpoint', message: `is required for ${input.byosProvider}` });
  if (input.byosEndpoint) {
    try {
      // Shape and IP literals now; a host name's addresses are checked by the guard at every connection.
      checkUrlShape(input.byosEndpoint, policy);
    } catch (err) {
      if (!(err instanceof EgressError)) throw err;
      fields.push({ field: 'byosEndpoint', message: err.message });
    }
  }
  if (fields.length) throw errors.validation(fields);
  return {
    provider: input.byosProvider as ByosProvider,
    endpoint: input.byosEndpoint ? input.byosEndpoint.replace(/\/+$/, '') : null,
    bucket: input.byosBucket,
    region: input.byosRegion || null,
    accessKey: input.byosAccessKey,
    secretKey: input.byosSecretKey,
  };
}

export function regionHandlers(deps: RegionsDeps) {
  const { store, box, catalogue } = deps;
  const prefsCol = store.collection(preferences);
  const storageCol = store.collection(storageConfigs);

  async function currentPrefs(tenantId: string): Promise<Prefs> {
    return prefsOf(await prefsCol.get(tenantId), catalogue);
  }

  /** Inserts or replaces a per-tenant document; a concurrent first insert by another replica is retried. */
  async function upsert<T extends { id: string; createdAt: string }>(
    col: { get(id: string): Promise<T | null>; insert(d: T): Promise<T>; update(id: string, w: object, p: Partial<T>): Promise<T | null> },
    doc: T,
  ): Promise<T> {
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      const existing = await col.get(doc.id);
      if (existing) {
        const updated = await col.update(doc.id, {}, { ...doc, createdAt: existing.createdAt });
        if (updated) return updated;
      } else {
        try {
          return await col.insert(doc);
        } catch (err) {
          if (!(err instanceof DuplicateKeyError)) throw err;
        }
      }
    }
    throw errors.conflict('The configuration changed concurrently; try again');
  }

  function storageInputFrom(input: regionsV1.StorageInput | undefined): regionsV1.StorageInput {
    if (!input) throw errors.validation([{ field: 'storageMode', message: 'is required' }]);
    if (input.storageMode !== 'platform' && input.storageMode !== 'byos')
      throw errors.validation([{ field: 'storageMode', message: 'must be platform or byos' }]);
    return input;
  }

  return {
    async listRegions(_req: regionsV1.ListRegionsRequest, ctx: CallContext): Promise<regionsV1.ListRegionsResponse> {
      caller(ctx, undefined);
      return { regions: catalogue.regions.map((r) => ({ ...r })) };
    },

    async getPreferences(req: regionsV1.GetPreferencesRequest, ctx: CallContext): Promise<regionsV1.GetPreferencesResponse> {
      const { auth } = caller(ctx, req.tenantId);
      return { preferences: toPreferences(await currentPrefs(auth.tid)) };
    },

    async updatePreferences(req: regionsV1.UpdatePreferencesRequest, ctx: CallContext): Promise<regionsV1.UpdatePreferencesResponse> {
      const { auth } = caller(ctx, req.tenantId, true);
      const patch: Partial<Prefs> = {
        primaryRegion: req.primaryRegion,
        secondaryRegion: req.clearSecondaryRegion ? null : req.secondaryRegion,
        dataResidencyRequired: req.dataResidencyRequired,
        dataResidencyRegion: req.clearDataResidencyRegion ? null : req.dataResidencyRegion,
        complianceLevel: req.complianceLevel,
      };
      const [plan, storage] = await Promise.all([planOf(store, auth.tid), storageCol.get(auth.tid)]);
      const platformRegion = storage?.storageMode === 'platform' ? storage.platformRegion : null;
      // Compare-and-set on `rev`: concurrent partial changes by several replicas never lose one another.
      for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
        const doc = await prefsCol.get(auth.tid);
        const next = applyPreferences(prefsOf(doc, catalogue), patch, plan, platformRegion, catalogue);
        const now = nowIso();
        if (!doc) {
          try {
            await prefsCol.insert({ id: auth.tid, ...next, rev: 1, createdAt: now, updatedAt: now });
            return { preferences: toPreferences(next) };
          } catch (err) {
            if (!(err instanceof DuplicateKeyError)) throw err;
            continue;
          }
        }
        if (await prefsCol.update(auth.tid, { rev: doc.rev }, { ...next, rev: doc.rev + 1, updatedAt: now }))
          return { preferences: toPreferences(next) };
      }
      throw errors.conflict('The preferences changed concurrently; try again');
    },

    async getStorage(req: regionsV1.GetStorageRequest, ctx: CallContext): Promise<regionsV1.GetStorageResponse> {
      const { auth } = caller(ctx, req.tenantId);
      const [doc, prefs] = await Promise.all([storageCol.get(auth.tid), currentPrefs(auth.tid)]);
      return { storage: toStorage(doc, prefs.primaryRegion) };
    },

    async putStorage(req: regionsV1.PutStorageRequest, ctx: CallContext): Promise<regionsV1.PutStorageResponse> {
      const { auth } = caller(ctx, req.tenantId, true);
      const input = storageInputFrom(req.storage);
      const prefs = await currentPrefs(auth.tid);
      const now = nowIso();
      const base = { id: auth.tid, createdAt: now, updatedAt: now };
      let doc: StorageDoc;
      if (input.storageMode === 'platform') {
        const fields: FieldError[] = [];
        for (const key of ['byosProvider', 'byosEndpoint', 'byosBucket', 'byosRegion', 'byosAccessKey', 'byosSecretKey'] as const)
          if (input[key]) fields.push({ field: key, message: 'is only used when storageMode is byos' });
        if (input.platformRegion) catalogue.check('platformRegion', input.platformRegion, fields);
        if (fields.length) throw errors.validation(fields);
        const conflict = input.platformRegion ? placementProblems(prefs, input.platformRegion, catalogue) : null;
        if (conflict) throw conflict;
        doc = {
          ...base,
          storageMode: 'platform',
          platformRegion: input.platformRegion || null,
          byosProvider: null,
          byosEndpoint: null,
          byosBucket: null,
          byosRegion: null,
          byosAccessKeySealed: null,
          byosSecretKeySealed: null,
          byosAccessKeyLast4: null,
        };
      } else {
        const t = parseByos(input, deps.policy);
        requireFeature(await planOf(store, auth.tid), 'byos_storage');
        doc = {
          ...base,
          storageMode: 'byos',
          platformRegion: null,
          byosProvider: t.provider,
          byosEndpoint: t.endpoint,
          byosBucket: t.bucket,
          byosRegion: t.region,
          byosAccessKeySealed: box.encrypt(t.accessKey),
          byosSecretKeySealed: box.encrypt(t.secretKey),
          byosAccessKeyLast4: t.accessKey.slice(-4),
        };
      }
      const saved = await upsert(storageCol, doc);
      return { storage: toStorage(saved, prefs.primaryRegion) };
    },

    async validateStorage(req: regionsV1.ValidateStorageRequest, ctx: CallContext): Promise<regionsV1.ValidateStorageResponse> {
      const { auth } = caller(ctx, req.tenantId, true);
      let target: ByosTarget;
      if (req.storage) {
        const input = storageInputFrom(req.storage);
        if (input.storageMode !== 'byos') throw nothingToValidate();
        target = parseByos(input, deps.policy);
      } else {
        const doc = await storageCol.get(auth.tid);
        if (!doc || doc.storageMode !== 'byos' || !doc.byosAccessKeySealed || !doc.byosSecretKeySealed) throw nothingToValidate();
        target = {
          provider: doc.byosProvider as ByosProvider,
          endpoint: doc.byosEndpoint,
          bucket: doc.byosBucket!,
          region: doc.byosRegion,
          accessKey: box.decrypt(doc.byosAccessKeySealed),
          secretKey: box.decrypt(doc.byosSecretKeySealed),
        };
      }
      const result = await validateByos(target, { policy: deps.policy, timeoutMs: deps.validateTimeoutMs });
      return { valid: result.valid, provider: result.provider, checks: result.checks };
    },

    async checkFeature(req: regionsV1.CheckFeatureRequest, ctx: CallContext): Promise<regionsV1.CheckFeatureResponse> {
      const { auth } = caller(ctx, req.tenantId);
      if (!isFeatureKey(req.featureKey)) throw errors.notFound('feature', req.featureKey);
      return checkFeature(await planOf(store, auth.tid), req.featureKey);
    },

    async getRouting(_req: regionsV1.GetRoutingRequest, ctx: CallContext): Promise<regionsV1.GetRoutingResponse> {
      const { auth } = caller(ctx, undefined);
      const [plan, prefs, storage] = await Promise.all([planOf(store, auth.tid), currentPrefs(auth.tid), storageCol.get(auth.tid)]);
      const view = toStorage(storage, prefs.primaryRegion);
      const secondaryInEffect = prefs.secondaryRegion && checkFeature(plan, 'secondary_region').enabled;
      return {
        plan,
        primaryRegion: prefs.primaryRegion,
        secondaryRegion: secondaryInEffect ? prefs.secondaryRegion! : '',
        dataResidencyRequired: prefs.dataResidencyRequired,
        dataResidencyRegion: prefs.dataResidencyRegion ?? '',
        storageLocation: view.storageMode === 'byos' ? `byos:${view.byosProvider}` : view.platformRegion,
      };
    },
  };
}

function nothingToValidate(): AppError {
  return errors.badRequest('nothing_to_validate', 'Only a customer-provided (byos) storage configuration can be validated');
}
