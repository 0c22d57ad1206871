import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { API_KEY_ENVIRONMENTS, API_KEY_TYPES, SCOPES } from '@svc/kit';
import type { identityV1 } from '@svc/proto';
import type { GatewayDeps } from '../app';
import { pageOf, route } from '../lib/route';
import { IdParams, Nullable, Obj, PageQuery, Str, Timestamp } from '../schemas';

const literals = (values: readonly string[]) => Type.Union(values.map((v) => Type.Literal(v)));

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
});

/** `scopes` is null for a key with full access, a list for a limited one. */
export function apiKeyView(k: identityV1.ApiKey) {
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
  };
}

export function apiKeyRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { identity } = deps.clients;

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
        },
        call,
      );
      return { ...apiKeyView(res.apiKey!), key: res.key };
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
      return pageOf(res.apiKeys.map(apiKeyView), query.limit, res.nextCursor);
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/api-keys/:id',
    operationId: 'getApiKey',
    access: 'sessionManager',
    tag: 'api-keys',
    summary: 'One API key (never the secret)',
    params: IdParams,
    response: ApiKey,
    handler: async ({ params, call }) => apiKeyView((await identity.getApiKey({ id: params.id }, call)).apiKey!),
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
