import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { identityV1 } from '@svc/proto';
import type { GatewayDeps } from '../deps';
import { pageOf, route } from '../lib/route';
import { IdParams, Nullable, Obj, PageQuery, Str, Timestamp } from '../schemas';

const PROVIDERS = ['openai', 'anthropic', 'openai-compatible', 'azure-openai', 'gemini', 'bedrock'];
const Provider = Type.Union(
  PROVIDERS.map((p) => Type.Literal(p)),
  { description: 'The wire protocol the entry is called with' },
);
const Name = Str(1, 100, {
  pattern: '^[A-Za-z0-9._:/-]{1,100}$',
  description: 'What clients send as `model` (not starting with `agent:`); several entries may share a name',
});
const PerMillion = Type.Number({ minimum: 0, description: 'credits per 1,000,000 tokens' });
const PriceInput = Obj(
  { input: PerMillion, output: PerMillion, cachedInput: Type.Optional(PerMillion) },
  "The entry's own price; cachedInput defaults to input",
);

const Model = Obj({
  id: Type.String(),
  name: Type.String(),
  provider: Provider,
  upstreamModel: Type.String({ description: "The provider's model id" }),
  baseUrl: Nullable(Type.String(), { description: "null: the provider's public API" }),
  apiKeySet: Type.Boolean({ description: 'Whether the entry has a key of its own (the key is write-only)' }),
  apiKeySecret: Nullable(Type.String(), { description: 'The tenant secret whose value is the key, read at call time' }),
  apiVersion: Nullable(Type.String()),
  region: Nullable(Type.String()),
  weight: Type.Integer({ description: 'Share of the calls to the name among its enabled entries' }),
  price: Obj(
    { input: PerMillion, output: PerMillion, cachedInput: PerMillion },
    'The price calls on this entry are billed at (credits per 1,000,000 tokens)',
  ),
  priceSource: Type.Union(
    ['entry', 'platform', 'default'].map((s) => Type.Literal(s)),
    {
      description:
        "entry: its own price; platform: the platform's price list for its upstream model × CREDITS_PER_USD; default: CREDITS_PER_1K_TOKENS × 1000",
    },
  ),
  maxOutputTokens: Nullable(Type.Integer(), { description: "Output bound of a call (null: the tenant's, else LLM_MAX_TOKENS)" }),
  enabled: Type.Boolean(),
  createdAt: Timestamp,
  updatedAt: Timestamp,
});

const fields = {
  upstreamModel: Type.Optional(Str(1, 200, { description: 'Defaults to name' })),
  baseUrl: Type.Optional(
    Nullable(Str(1, 2000), {
      description:
        'Includes the version path; must pass the egress guard (400 base_url_not_allowed). Required for openai-compatible and azure-openai',
    }),
  ),
  apiKey: Type.Optional(Nullable(Str(1, 4000), { description: 'Write-only: stored encrypted, shown as apiKeySet' })),
  apiKeySecret: Type.Optional(Nullable(Str(1, 128), { description: 'A tenant secret holding the key (read at each call)' })),
  apiVersion: Type.Optional(Nullable(Str(1, 200), { description: 'azure-openai: the api-version' })),
  region: Type.Optional(Nullable(Str(1, 200), { description: 'bedrock: the AWS region' })),
  weight: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, description: 'Default 1' })),
  price: Type.Optional(Nullable(PriceInput, { description: "null: the platform's price list, else the default price" })),
  maxOutputTokens: Type.Optional(Nullable(Type.Integer({ minimum: 1, maximum: 1_000_000 }))),
  enabled: Type.Optional(Type.Boolean({ description: 'Default true' })),
};

type Body = {
  name?: string;
  provider?: string;
  upstreamModel?: string;
  baseUrl?: string | null;
  apiKey?: string | null;
  apiKeySecret?: string | null;
  apiVersion?: string | null;
  region?: string | null;
  weight?: number;
  price?: { input: number; output: number; cachedInput?: number } | null;
  maxOutputTokens?: number | null;
  enabled?: boolean;
};

/** Keys are write-only: only whether one is set is ever shown. */
function view(m: identityV1.Model) {
  const price = m.price!;
  return {
    id: m.id,
    name: m.name,
    provider: m.provider,
    upstreamModel: m.upstreamModel,
    baseUrl: m.baseUrl || null,
    apiKeySet: m.apiKeySet,
    apiKeySecret: m.apiKeySecret || null,
    apiVersion: m.apiVersion || null,
    region: m.region || null,
    weight: m.weight,
    price: { input: price.input, output: price.output, cachedInput: price.cachedInput },
    priceSource: price.source,
    maxOutputTokens: m.maxOutputTokens ?? null,
    enabled: m.enabled,
    createdAt: m.createdAt,
    updatedAt: m.updatedAt,
  };
}

/** The values a body sets (null and absent set nothing). */
function values(b: Body) {
  return {
    upstreamModel: b.upstreamModel,
    baseUrl: b.baseUrl ?? undefined,
    apiKey: b.apiKey ?? undefined,
    apiKeySecret: b.apiKeySecret ?? undefined,
    apiVersion: b.apiVersion ?? undefined,
    region: b.region ?? undefined,
    weight: b.weight,
    price: b.price ?? undefined,
    maxOutputTokens: b.maxOutputTokens ?? undefined,
    enabled: b.enabled,
  };
}

/** A body as identity's update: a value sets a field, null clears it, absent leaves it. */
function changes(b: Body): Omit<identityV1.UpdateModelRequest, 'id'> {
  return {
    ...values(b),
    name: b.name,
    provider: b.provider,
    clearBaseUrl: b.baseUrl === null,
    clearApiKey: b.apiKey === null,
    clearApiKeySecret: b.apiKeySecret === null,
    clearApiVersion: b.apiVersion === null,
    clearRegion: b.region === null,
    clearPrice: b.price === null,
    clearMaxOutputTokens: b.maxOutputTokens === null,
  };
}

/** The model catalogue (CONTRACT.md 12): reads by any credential of the tenant, writes by owners and admins. */
export function modelRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { identity } = deps.clients;

  route(app, {
    method: 'POST',
    url: '/api/v1/models',
    operationId: 'createModel',
    access: 'manager',
    tag: 'models',
    summary: `Add a model to the catalogue (at most MODELS_PER_TENANT, default 100)`,
    status: 201,
    body: Obj({ name: Name, provider: Provider, ...fields }),
    response: Model,
    handler: async ({ body, call }) =>
      view((await identity.createModel({ ...values(body), name: body.name, provider: body.provider }, call)).model!),
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/models',
    operationId: 'listModels',
    access: 'authenticated',
    tag: 'models',
    summary: 'The catalogue, newest first',
    query: PageQuery,
    list: true,
    response: Model,
    handler: async ({ query, call }) => {
      const res = await identity.listModels({ limit: query.limit, cursor: query.cursor ?? '', name: '' }, call);
      return pageOf(res.models.map(view), query.limit, res.nextCursor);
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/models/:id',
    operationId: 'getModel',
    access: 'authenticated',
    tag: 'models',
    summary: 'A catalogue entry',
    params: IdParams,
    response: Model,
    handler: async ({ params, call }) => view((await identity.getModel({ id: params.id }, call)).model!),
  });

  route(app, {
    method: 'PATCH',
    url: '/api/v1/models/:id',
    operationId: 'updateModel',
    access: 'manager',
    tag: 'models',
    summary: 'Change a catalogue entry; null clears a field',
    params: IdParams,
    body: Obj({ name: Type.Optional(Name), provider: Type.Optional(Provider), ...fields }),
    response: Model,
    handler: async ({ params, body, call }) => view((await identity.updateModel({ id: params.id, ...changes(body) }, call)).model!),
  });

  route(app, {
    method: 'DELETE',
    url: '/api/v1/models/:id',
    operationId: 'deleteModel',
    access: 'manager',
    tag: 'models',
    summary: 'Remove a catalogue entry',
    params: IdParams,
    response: Obj({ id: Type.String(), deleted: Type.Boolean() }),
    handler: async ({ params, call }) => ({ id: (await identity.deleteModel({ id: params.id }, call)).id, deleted: true }),
  });
}
