import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { ROLES } from '@svc/contracts';
import type { identityV1 } from '@svc/proto';
import type { GatewayDeps } from '../deps';
import { pageOf, route } from '../lib/route';
import { Obj, PageQuery, Str, Tenant, Timestamp } from '../schemas';

const Member = Obj({ userId: Type.String(), email: Type.String(), name: Type.String(), role: Type.String(), joinedAt: Timestamp });
const Role = Type.Union(ROLES.map((r) => Type.Literal(r)));
const UserParams = Obj({ userId: Str(1, 100) });
const Network = Obj({ ipAllowlist: Type.Array(Str(1, 64), { maxItems: 100 }) });

const member = (m: identityV1.Member) => m;

export function tenantRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { identity } = deps.clients;

  route(app, {
    method: 'GET',
    url: '/api/v1/tenant',
    operationId: 'getTenant',
    access: 'authenticated',
    tag: 'tenant',
    summary: 'The current tenant',
    response: Tenant,
    handler: ({ principal, call }) => deps.caches.tenants.get(principal.tenantId, async () => (await identity.getTenant({}, call)).tenant!),
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/tenant/team/members',
    operationId: 'listTeamMembers',
    access: 'unscoped',
    tag: 'team',
    summary: 'Team members, newest first',
    query: PageQuery,
    list: true,
    response: Member,
    handler: async ({ query, call }) => {
      const res = await identity.listMembers({ limit: query.limit, cursor: query.cursor ?? '' }, call);
      return pageOf(res.members.map(member), query.limit, res.nextCursor);
    },
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/tenant/team/members',
    operationId: 'addTeamMember',
    access: 'manager',
    tag: 'team',
    summary: 'Add a member with a password (owners and admins)',
    status: 201,
    body: Obj({ email: Str(3, 254), name: Str(1, 200), role: Role, password: Str(8, 200) }),
    response: Member,
    handler: async ({ body, call }) => member((await identity.addMember(body, call)).member!),
  });

  route(app, {
    method: 'PATCH',
    url: '/api/v1/tenant/team/members/:userId',
    operationId: 'updateTeamMember',
    access: 'manager',
    tag: 'team',
    summary: "Change a member's role",
    params: UserParams,
    body: Obj({ role: Role }),
    response: Member,
    handler: async ({ params, body, call }) =>
      member((await identity.updateMember({ userId: params.userId, role: body.role }, call)).member!),
  });

  route(app, {
    method: 'DELETE',
    url: '/api/v1/tenant/team/members/:userId',
    operationId: 'removeTeamMember',
    access: 'manager',
    tag: 'team',
    summary: 'Remove a member; their sessions end',
    params: UserParams,
    response: Obj({ userId: Type.String(), removed: Type.Boolean() }),
    handler: async ({ params, call }) => {
      await identity.removeMember({ userId: params.userId }, call);
      return { userId: params.userId, removed: true };
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/tenant/security/network',
    operationId: 'getNetworkSettings',
    access: 'manager',
    tag: 'security',
    summary: 'The IP allowlist for API keys',
    response: Network,
    handler: async ({ call }) => ({ ipAllowlist: (await identity.getNetworkAllowlist({}, call)).ipAllowlist }),
  });

  route(app, {
    method: 'PUT',
    url: '/api/v1/tenant/security/network',
    operationId: 'putNetworkSettings',
    access: 'manager',
    tag: 'security',
    summary: 'Replace the IP allowlist (IPs and CIDRs, v4 and v6; empty allows any address)',
    body: Network,
    response: Network,
    handler: async ({ body, call }) => ({ ipAllowlist: (await identity.setNetworkAllowlist(body, call)).ipAllowlist }),
  });
}
