import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { identityV1 } from '@svc/proto';
import type { GatewayDeps } from '../deps';
import { pageOf, route } from '../lib/route';
import { Nullable, Obj, PageQuery, Str, Timestamp } from '../schemas';

const Secret = Obj({
  name: Type.String(),
  description: Nullable(Type.String()),
  version: Type.Integer({ description: '1 on create, +1 on each new value' }),
  createdAt: Timestamp,
  updatedAt: Timestamp,
});
const NameParams = Obj({ name: Str(1, 200) });
const Value = Str(1, 65_536, { description: 'write-only: stored encrypted, never returned' });

/** Metadata only: the value never leaves. */
function view(s: identityV1.Secret) {
  return { name: s.name, description: s.description || null, version: s.version, createdAt: s.createdAt, updatedAt: s.updatedAt };
}

export function secretRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { identity } = deps.clients;

  route(app, {
    method: 'POST',
    url: '/api/v1/secrets',
    operationId: 'createSecret',
    access: 'secrets:write',
    tag: 'secrets',
    summary: 'Store a secret (409 when the name is taken); the value is encrypted and never returned',
    status: 201,
    body: Obj({
      name: Str(1, 128, { pattern: '^[A-Za-z_][A-Za-z0-9_]{0,127}$', description: 'letters, digits and _, not starting with a digit' }),
      value: Value,
      description: Type.Optional(Str(0, 500)),
    }),
    response: Secret,
    handler: async ({ body, call }) =>
      view((await identity.createSecret({ name: body.name, value: body.value, description: body.description ?? '' }, call)).secret!),
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/secrets',
    operationId: 'listSecrets',
    access: 'secrets:read',
    tag: 'secrets',
    summary: 'Secrets (metadata), newest first',
    query: PageQuery,
    list: true,
    response: Secret,
    handler: async ({ query, call }) => {
      const res = await identity.listSecrets({ limit: query.limit, cursor: query.cursor ?? '' }, call);
      return pageOf(res.secrets.map(view), query.limit, res.nextCursor);
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/secrets/:name',
    operationId: 'getSecret',
    access: 'secrets:read',
    tag: 'secrets',
    summary: "A secret's metadata",
    params: NameParams,
    response: Secret,
    handler: async ({ params, call }) => view((await identity.getSecret({ name: params.name }, call)).secret!),
  });

  route(app, {
    method: 'PUT',
    url: '/api/v1/secrets/:name',
    operationId: 'updateSecret',
    access: 'secrets:write',
    tag: 'secrets',
    summary: 'Store a new value as the next version',
    params: NameParams,
    body: Obj({ value: Value }),
    response: Secret,
    handler: async ({ params, body, call }) => view((await identity.updateSecret({ name: params.name, value: body.value }, call)).secret!),
  });

  route(app, {
    method: 'DELETE',
    url: '/api/v1/secrets/:name',
    operationId: 'deleteSecret',
    access: 'secrets:write',
    tag: 'secrets',
    summary: 'Delete a secret and its value',
    params: NameParams,
    response: Obj({ name: Type.String(), deleted: Type.Boolean() }),
    handler: async ({ params, call }) => ({ name: (await identity.deleteSecret({ name: params.name }, call)).name, deleted: true }),
  });
}
