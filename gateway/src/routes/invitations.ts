import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { ROLES } from '@svc/contracts';
import type { GatewayDeps } from '../deps';
import { pageOf, route } from '../lib/route';
import { IdParams, Obj, PageQuery, Str, Timestamp } from '../schemas';

const Invitation = Obj({
  id: Type.String(),
  email: Type.String(),
  role: Type.String(),
  expiresAt: Timestamp,
  status: Type.Union(['pending', 'accepted', 'revoked', 'expired'].map((s) => Type.Literal(s))),
  createdAt: Timestamp,
});

/** Invitations by email (CONTRACT.md 13); the invitee accepts with POST /auth/invitations/accept. */
export function invitationRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { identity } = deps.clients;

  route(app, {
    method: 'POST',
    url: '/api/v1/tenant/team/invitations',
    operationId: 'createInvitation',
    access: 'manager',
    tag: 'team',
    summary: 'Invite someone by email with a role: they get a one-time link (INVITATION_TTL_HOURS) to join',
    status: 201,
    body: Obj({ email: Str(3, 254), role: Type.Union(ROLES.map((r) => Type.Literal(r))) }),
    response: Invitation,
    handler: async ({ body, call }) => (await identity.createInvitation(body, call)).invitation!,
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/tenant/team/invitations',
    operationId: 'listInvitations',
    access: 'manager',
    tag: 'team',
    summary: "The tenant's invitations, newest first, with their status",
    query: PageQuery,
    list: true,
    response: Invitation,
    handler: async ({ query, call }) => {
      const res = await identity.listInvitations({ limit: query.limit, cursor: query.cursor ?? '' }, call);
      return pageOf(res.invitations, query.limit, res.nextCursor);
    },
  });

  route(app, {
    method: 'DELETE',
    url: '/api/v1/tenant/team/invitations/:id',
    operationId: 'revokeInvitation',
    access: 'manager',
    tag: 'team',
    summary: 'Revoke a pending invitation: its link stops working',
    params: IdParams,
    response: Invitation,
    handler: async ({ params, call }) => (await identity.revokeInvitation({ id: params.id }, call)).invitation!,
  });
}
