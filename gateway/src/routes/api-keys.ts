import { type Static, Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { API_KEY_ENVIRONMENTS, API_KEY_TYPES, SCOPES } from '@svc/contracts';
import type { identityV1 } from '@svc/proto';
import type { CallOptions } from '@svc/kit';
import type { GatewayDeps } from '../deps';
import { pageOf, route } from '../lib/route';
import { IdParams, Nullable, Obj, PageQuery, Str, Timestamp } from '../schemas';
import { keyUsageOf } from '../lib/key-usage';

const literals = (values: readonly string[]) => Type.Union(values.map((v) => Type.Literal(v)));

const Int = (min: number, max: number) => Type.Integer({ minimum: min, maximum: max });
const RANGES = {
  requestsPerMinute: Int(1, 1_000_000),
  tokensPerMinute: Int(1, 1_000_000_000),
  concurrency: Int(1, 10_000),
};
const CreditBudget = Obj(
  { credits: Int(1, 1_000_000_000_000), period: literals(['total', 'month']) },
  'Credits the key may spend in total, or per calendar month in UTC: a model call whose reservation does not fit in what is left gets 402 INSUFFICIENT_CREDITS with reason key_budget_exhausted',
);
const Limits = Obj({
  requestsPerMinute: Type.Optional(RANGES.requestsPerMinute),
  tokensPerMinute: Type.Optional(RANGES.tokensPerMinute),
  concurrency: Type.Optional(RANGES.concurrency),
  creditBudget: Type.Optional(CreditBudget),
});
/** A PATCH's limits: a value sets that limit, `null` removes it, an absent field keeps it. */
const LimitsPatch = Obj({
  requestsPerMinute: Type.Optional(Nullable(RANGES.requestsPerMinute)),
  tokensPerMinute: Type.Optional(Nullable(RANGES.tokensPerMinute)),
  concurrency: Type.Optional(Nullable(RANGES.concurrency)),
  creditBudget: Type.Optional(Nullable(CreditBudget)),
});
const Usage = Obj({
  requestsThisMinute: Type.Integer({ description: 'Requests counted against the key in the current rate window' }),
  tokensThisMinute: Type.Integer({ description: "Model tokens recorded for the key in billing's current 60 s window" }),
  creditsThisPeriod: Type.Integer({ description: "Credits spent in the budget's period (this UTC month, else in total)" }),
});

const ApiKey = Obj({
  id: Type.String(),
  name: Type.String(),
  type: literals(Object.keys(API_KEY_TYPES)),
  environment: literals(API_KEY_ENVIRONMENTS),
  scopes: Nullable(Type.Array(Type.String())),
  start: Type.String({ description: 'First 12 characters of the key, for display' }),
  createdAt: Timestamp,
  lastUsedAt: Nullable(Timestamp),
  expiresAt: Nullable(Timestamp),
  limits: Limits,
  usage: Usage,
});

type KeyUsageView = { requestsThisMinute: number; tokensThisMinute: number; creditsThisPeriod: number };

/** `scopes` is null for a key with full access, a list for a limited one. */
export function apiKeyView(k: identityV1.ApiKey, usage: KeyUsageView) {
  return {
    id: k.id,
    name: k.name,
    type: k.type,
    environment: k.environment,
    scopes: k.scoped ? k.scopes : null,
    start: k.start,
    createdAt: k.createdAt,
    lastUsedAt: k.lastUsedAt ?? null,
    expiresAt: k.expiresAt ?? null,
    limits: limitsView(k.limits),
    usage,
  };
}

/** Only the limits that are set: a removed limit is absent. */
function limitsView(l: identityV1.ApiKeyLimits | undefined) {
  const out: Record<string, unknown> = {};
  if (l?.requestsPerMinute) out.requestsPerMinute = l.requestsPerMinute;
  if (l?.tokensPerMinute) out.tokensPerMinute = l.tokensPerMinute;
  if (l?.concurrency) out.concurrency = l.concurrency;
  if (l?.creditBudget) out.creditBudget = { credits: l.creditBudget.credits, period: l.creditBudget.period };
  return out;
}

/** Body limits -> the identity message (POST: every given field is a value). */
function toLimits(l: Static<typeof Limits> | undefined): identityV1.ApiKeyLimits | undefined {
  return l && { ...l, creditBudget: l.creditBudget && { ...l.creditBudget } };
}

function toLimitsPatch(l: Static<typeof LimitsPatch> | undefined): identityV1.ApiKeyLimitsPatch | undefined {
  if (!l) return undefined;
  const field = (v: number | null | undefined): identityV1.LimitPatch | undefined =>
    v === undefined ? undefined : { change: v === null ? { $case: 'clear', value: true } : { $case: 'value', value: v } };
  return {
    requestsPerMinute: field(l.requestsPerMinute),
    tokensPerMinute: field(l.tokensPerMinute),
    concurrency: field(l.concurrency),
    creditBudget:
      l.creditBudget === undefined
        ? undefined
        : { change: l.creditBudget === null ? { $case: 'clear', value: true } : { $case: 'value', value: { ...l.creditBudget } } },
  };
}

export function apiKeyRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { identity } = deps.clients;
  const views = async (keys: identityV1.ApiKey[], call: CallOptions) => {
    const usage = await keyUsageOf(deps, keys, call);
    return keys.map((k, i) => apiKeyView(k, usage[i]));
  };
  const view = async (k: identityV1.ApiKey, call: CallOptions) => (await views([k], call))[0];

  route(app, {
    method: 'POST',
    url: '/api/v1/api-keys',
    operationId: 'createApiKey',
    access: 'sessionManager',
    tag: 'api-keys',
    summary: 'Create an API key; the secret is in this response only',
    status: 201,
    body: Obj({
      name: Str(1, 100),
      type: Type.String({ maxLength: 50 }),
      environment: Type.String({ maxLength: 50 }),
      scopes: Type.Optional(Type.Array(Type.String({ maxLength: 50 }), { maxItems: SCOPES.length * 2 })),
      expiresAt: Type.Optional(Nullable(Str(1, 40))),
      limits: Type.Optional(Limits),
    }),
    response: Type.Intersect([ApiKey, Obj({ key: Type.String() })]),
    handler: async ({ body, call }) => {
      const res = await identity.createApiKey(
        {
          name: body.name,
          type: body.type,
          environment: body.environment,
          scopes: body.scopes ?? [],
          scoped: body.scopes !== undefined,
          expiresAt: body.expiresAt ?? undefined,
          limits: toLimits(body.limits),
        },
        call,
      );
      return { ...(await view(res.apiKey!, call)), key: res.key };
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/api-keys',
    operationId: 'listApiKeys',
    access: 'sessionManager',
    tag: 'api-keys',
    summary: 'Active API keys, newest first (never the secret)',
    query: PageQuery,
    list: true,
    response: ApiKey,
    handler: async ({ query, call }) => {
      const res = await identity.listApiKeys({ limit: query.limit, cursor: query.cursor ?? '' }, call);
      return pageOf(await views(res.apiKeys, call), query.limit, res.nextCursor);
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/api-keys/:id',
    operationId: 'getApiKey',
    access: 'sessionManager',
    tag: 'api-keys',
    summary: 'One API key with its limits and live usage (never the secret)',
    params: IdParams,
    response: ApiKey,
    handler: async ({ params, call }) => view((await identity.getApiKey({ id: params.id }, call)).apiKey!, call),
  });

  route(app, {
    method: 'PATCH',
    url: '/api/v1/api-keys/:id',
    operationId: 'updateApiKey',
    access: 'sessionManager',
    tag: 'api-keys',
    summary: 'Rename a key or change its limits (merged field by field; null removes one); in effect within one second',
    params: IdParams,
    body: Obj({ name: Type.Optional(Str(1, 100)), limits: Type.Optional(LimitsPatch) }),
    response: ApiKey,
    handler: async ({ params, body, call }) => {
      const res = await identity.updateApiKey({ id: params.id, name: body.name, limits: toLimitsPatch(body.limits) }, call);
      return view(res.apiKey!, call);
    },
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/api-keys/:id/rotate',
    operationId: 'rotateApiKey',
    access: 'sessionManager',
    tag: 'api-keys',
    summary: 'A new secret for the key; the old one keeps working for gracePeriodSeconds (default 0), then is refused',
    status: 201,
    params: IdParams,
    optionalBody: true,
    body: Obj({ gracePeriodSeconds: Type.Optional(Type.Integer({ minimum: 0, maximum: 86_400 })) }),
    response: Type.Intersect([ApiKey, Obj({ key: Type.String() })]),
    handler: async ({ params, body, call }) => {
      const res = await identity.rotateApiKey({ id: params.id, gracePeriodSeconds: body.gracePeriodSeconds ?? 0 }, call);
      return { ...(await view(res.apiKey!, call)), key: res.key };
    },
  });

  route(app, {
    method: 'DELETE',
    url: '/api/v1/api-keys/:id',
    operationId: 'revokeApiKey',
    access: 'sessionManager',
    tag: 'api-keys',
    summary: 'Revoke an API key: refused everywhere within one second',
    params: IdParams,
    response: Obj({ id: Type.String(), revoked: Type.Boolean() }),
    handler: async ({ params, call }) => {
      await identity.revokeApiKey({ id: params.id }, call);
      return { id: params.id, revoked: true };
    },
  });
}
