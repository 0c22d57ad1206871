import { hostname } from 'node:os';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { isAppError } from '@svc/kit';
import type { regionsV1 } from '@svc/proto';
import type { GatewayDeps } from '../deps';
import { route } from '../lib/route';
import { serviceHealthProbe } from '../lib/service-health';
import { Nullable, Obj, Str } from '../schemas';

const RegionId = Str(1, 32);
const Region = Obj({ id: Type.String(), name: Type.String(), jurisdiction: Type.String(), available: Type.Boolean() });
const TenantParams = Obj({ tenantId: Str(1, 100) });

const Preferences = Obj({
  primaryRegion: Type.String(),
  secondaryRegion: Nullable(Type.String()),
  dataResidencyRequired: Type.Boolean(),
  dataResidencyRegion: Nullable(Type.String()),
  complianceLevel: Type.String({ description: 'standard, soc2, iso27001, pci_dss, gdpr (data in the EU), hipaa (data in the US)' }),
});

const StorageMode = Type.Union([Type.Literal('platform'), Type.Literal('byos')]);
const Provider = Type.Union(['s3', 'r2', 'gcs', 'azure'].map((p) => Type.Literal(p)));
const StorageFields = {
  storageMode: StorageMode,
  platformRegion: Type.Optional(RegionId),
  byosProvider: Type.Optional(Provider),
  byosEndpoint: Type.Optional(Str(1, 2000, { description: 'required for r2 and azure; defaults to the public endpoint for s3 and gcs' })),
  byosBucket: Type.Optional(Str(3, 63, { description: 'bucket, or container for azure' })),
  byosRegion: Type.Optional(Str(1, 64)),
  byosAccessKey: Type.Optional(Str(1, 1000, { description: 'access key id; the account name for azure. Write-only' })),
  byosSecretKey: Type.Optional(Str(1, 1000, { description: 'secret key; the account key for azure. Write-only' })),
};
const Storage = Obj({
  storageMode: StorageMode,
  platformRegion: Nullable(Type.String()),
  byosProvider: Nullable(Type.String()),
  byosEndpoint: Nullable(Type.String()),
  byosBucket: Nullable(Type.String()),
  byosRegion: Nullable(Type.String()),
  byosCredentialsSet: Type.Boolean(),
  byosAccessKeyLast4: Nullable(Type.String()),
  updatedAt: Nullable(Type.String()),
});
const Validation = Obj({
  valid: Type.Boolean(),
  provider: Type.String(),
  checks: Type.Array(Obj({ name: Type.String(), ok: Type.Boolean(), message: Type.String(), latencyMs: Type.Integer() })),
});
const Feature = Obj({ featureKey: Type.String(), enabled: Type.Boolean(), plan: Type.String(), requiredPlan: Type.String() });
const RoutingInfo = Obj({
  tenantId: Type.String(),
  plan: Nullable(Type.String()),
  regions: Nullable(
    Obj({
      primary: Type.String(),
      secondary: Nullable(Type.String({ description: 'the failover region in effect (growth and above)' })),
      dataResidencyRequired: Type.Boolean(),
      dataResidencyRegion: Nullable(Type.String()),
      storage: Type.String({ description: 'the platform region of stored files, or byos:<provider>' }),
    }),
  ),
  servedBy: Obj({ instanceId: Type.String(), region: Type.String() }),
  services: Type.Array(Obj({ name: Type.String(), status: Type.String(), latencyMs: Type.Number(), checkedAt: Type.String() }), {
    description: 'each backing service as this gateway sees it: a gRPC health check, timed (kept for 1 s)',
  }),
});

const orNull = (s: string) => s || null;

/**
 * A validation makes up to six provider calls, each limited by the regions service (STORAGE_VALIDATE_TIMEOUT_MS, at
 * most 10 s): a slow provider must end as `valid: false`, not as a 504.
 */
const VALIDATE_DEADLINE_MS = 65_000;

function preferencesView(p: regionsV1.Preferences) {
  return {
    primaryRegion: p.primaryRegion,
    secondaryRegion: orNull(p.secondaryRegion),
    dataResidencyRequired: p.dataResidencyRequired,
    dataResidencyRegion: orNull(p.dataResidencyRegion),
    complianceLevel: p.complianceLevel,
  };
}

/** The keys are never returned: whether they are set, and the access key's last 4 characters. */
function storageView(s: regionsV1.StorageConfig) {
  return {
    storageMode: s.storageMode as 'platform' | 'byos',
    platformRegion: orNull(s.platformRegion),
    byosProvider: orNull(s.byosProvider),
    byosEndpoint: orNull(s.byosEndpoint),
    byosBucket: orNull(s.byosBucket),
    byosRegion: orNull(s.byosRegion),
    byosCredentialsSet: s.byosCredentialsSet,
    byosAccessKeyLast4: orNull(s.byosAccessKeyLast4),
    updatedAt: orNull(s.updatedAt),
  };
}

function storageInput(body: Record<string, string | undefined>): regionsV1.StorageInput {
  return {
    storageMode: body.storageMode ?? '',
    platformRegion: body.platformRegion ?? '',
    byosProvider: body.byosProvider ?? '',
    byosEndpoint: body.byosEndpoint ?? '',
    byosBucket: body.byosBucket ?? '',
    byosRegion: body.byosRegion ?? '',
    byosAccessKey: body.byosAccessKey ?? '',
    byosSecretKey: body.byosSecretKey ?? '',
  };
}

/**
 * Regions and storage (spec 4.5), feature checks and routing info. Every route needs a credential without a scope
 * list (CONTRACT.md 3); changes need the owner or admin role. The regions service compares a path `:tenantId`
 * with the caller's own and answers 404 for any other.
 */
export function regionRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { regions } = deps.clients;
  const health = serviceHealthProbe(deps.clients);
  const servedBy = { instanceId: deps.config.instanceId ?? hostname(), region: deps.config.region };

  route(app, {
    method: 'GET',
    url: '/api/v1/regions',
    operationId: 'listRegions',
    access: 'unscoped',
    tag: 'regions',
    summary: 'The region catalogue',
    response: Type.Array(Region),
    handler: async ({ call }) => (await regions.listRegions({}, call)).regions,
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/regions/preferences/:tenantId',
    operationId: 'getRegionalPreferences',
    access: 'unscoped',
    tag: 'regions',
    summary: "The tenant's regional preferences",
    params: TenantParams,
    response: Preferences,
    handler: async ({ params, call }) => preferencesView((await regions.getPreferences({ tenantId: params.tenantId }, call)).preferences!),
  });

  route(app, {
    method: 'PATCH',
    url: '/api/v1/regions/preferences/:tenantId',
    operationId: 'updateRegionalPreferences',
    access: 'manager',
    tag: 'regions',
    summary: 'Change some preferences; null clears an optional region. secondaryRegion needs the growth plan (403 otherwise)',
    params: TenantParams,
    body: Obj({
      primaryRegion: Type.Optional(RegionId),
      secondaryRegion: Type.Optional(Nullable(RegionId)),
      dataResidencyRequired: Type.Optional(Type.Boolean()),
      dataResidencyRegion: Type.Optional(Nullable(RegionId)),
      complianceLevel: Type.Optional(Str(1, 32)),
    }),
    response: Preferences,
    handler: async ({ params, body, call }) => {
      const res = await regions.updatePreferences(
        {
          tenantId: params.tenantId,
          primaryRegion: body.primaryRegion,
          secondaryRegion: body.secondaryRegion ?? undefined,
          clearSecondaryRegion: body.secondaryRegion === null,
          dataResidencyRequired: body.dataResidencyRequired,
          dataResidencyRegion: body.dataResidencyRegion ?? undefined,
          clearDataResidencyRegion: body.dataResidencyRegion === null,
          complianceLevel: body.complianceLevel,
        },
        call,
      );
      return preferencesView(res.preferences!);
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/regions/storage/:tenantId',
    operationId: 'getStorageConfig',
    access: 'unscoped',
    tag: 'regions',
    summary: "The tenant's storage configuration (keys never shown)",
    params: TenantParams,
    response: Storage,
    handler: async ({ params, call }) => storageView((await regions.getStorage({ tenantId: params.tenantId }, call)).storage!),
  });

  route(app, {
    method: 'PUT',
    url: '/api/v1/regions/storage/:tenantId',
    operationId: 'putStorageConfig',
    access: 'manager',
    tag: 'regions',
    summary: 'Replace the storage configuration: platform, or byos with provider, bucket and both keys (stored encrypted)',
    params: TenantParams,
    body: Obj(StorageFields),
    response: Storage,
    handler: async ({ params, body, call }) =>
      storageView((await regions.putStorage({ tenantId: params.tenantId, storage: storageInput(body) }, call)).storage!),
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/regions/storage/:tenantId/validate',
    operationId: 'validateStorageConfig',
    access: 'manager',
    tag: 'regions',
    summary: 'Test a byos configuration (the body, or the saved one when none) against the provider: a failure is valid=false',
    params: TenantParams,
    body: Obj({ ...StorageFields, storageMode: Type.Optional(StorageMode) }),
    optionalBody: true,
    response: Validation,
    handler: async ({ params, body, call }) => {
      const given = Object.keys(body).length > 0;
      const storage = given ? storageInput(body) : undefined;
      return regions.validateStorage({ tenantId: params.tenantId, storage }, { ...call, deadlineMs: VALIDATE_DEADLINE_MS });
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/regions/features/:tenantId/check/:featureKey',
    operationId: 'checkFeature',
    access: 'unscoped',
    tag: 'regions',
    summary: "Whether the tenant's plan has a feature, and the lowest plan that has it (unknown key 404)",
    params: Obj({ tenantId: Str(1, 100), featureKey: Str(1, 100) }),
    response: Feature,
    handler: async ({ params, call }) => regions.checkFeature({ tenantId: params.tenantId, featureKey: params.featureKey }, call),
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/routing-info',
    operationId: 'getRoutingInfo',
    access: 'unscoped',
    tag: 'regions',
    summary: "The tenant's regions, the gateway instance and region that served this request, and each service's health",
    response: RoutingInfo,
    handler: async ({ principal, call }) => {
      const [routing, services] = await Promise.all([
        // Still useful while regions is down: the services list says so.
        regions.getRouting({}, call).catch((err: unknown) => {
          if (isAppError(err) && (err.code === 'SERVICE_UNAVAILABLE' || err.code === 'GATEWAY_TIMEOUT')) return null;
          throw err;
        }),
        health(),
      ]);
      return {
        tenantId: principal.tenantId,
        plan: routing?.plan ?? null,
        regions: routing
          ? {
              primary: routing.primaryRegion,
              secondary: orNull(routing.secondaryRegion),
              dataResidencyRequired: routing.dataResidencyRequired,
              dataResidencyRegion: orNull(routing.dataResidencyRegion),
              storage: routing.storageLocation,
            }
          : null,
        servedBy,
        services,
      };
    },
  });
}
