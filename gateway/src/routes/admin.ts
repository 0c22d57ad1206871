import { timingSafeEqual } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { AppError, metricsText, sha256Hex } from '@svc/kit';
import type { GatewayDeps } from '../deps';
import { readCookie, SESSION_COOKIE } from '../plugins/authenticate';
import { route } from '../lib/route';
import { Obj, Str } from '../schemas';

const JWT_SHAPE = /^eyJ[\w-]*\.[\w-]+\.[\w-]+$/;

/**
 * The operator API (CONTRACT.md 5, Admin): `Authorization: Bearer $SVC_ADMIN_TOKEN`. Registered only when the token
 * is set, so without it these paths are unknown routes (404). A wrong token is 401; a tenant's valid credential is
 * 403 (it is a credential, just not the operator's).
 */
export function adminRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const adminToken = deps.config.adminToken;
  if (!adminToken) return;
  const { billing } = deps.clients;
  const expected = Buffer.from(sha256Hex(adminToken));

  async function operator(request: FastifyRequest): Promise<string> {
    const match = /^Bearer ([!-~]{1,4096})$/.exec(request.headers.authorization ?? '');
    if (match && timingSafeEqual(Buffer.from(sha256Hex(match[1])), expected)) return match[1];
    const cookie = readCookie(request.headers.cookie, SESSION_COOKIE);
    const credential = match?.[1] ?? cookie;
    if (credential) {
      const known = await (
        match
          ? JWT_SHAPE.test(credential)
            ? deps.resolver.fromJwt(credential)
            : deps.resolver.fromOpaque(credential, 'api_key')
          : deps.resolver.fromOpaque(credential, 'cookie')
      ).catch(() => null);
      if (known) throw new AppError('FORBIDDEN', 'This needs the operator token', { reason: 'operator_required' });
    }
    throw new AppError('UNAUTHORIZED', 'Invalid operator token');
  }

  // Checked before validation, as every credential is (CONTRACT.md 5: authentication, scope, then validation): a
  // caller without the operator token learns nothing about these routes' bodies.
  const tokens = new WeakMap<FastifyRequest, string>();
  app.addHook('onRequest', async (request) => {
    if (request.routeOptions.config.access === 'operator') tokens.set(request, await operator(request));
  });
  const tokenOf = (request: FastifyRequest): string => tokens.get(request) ?? '';

  // Prometheus text of this gateway process, for the operator (in a cluster, METRICS_PORT serves it unauthenticated
  // on a port only the scraper can reach).
  app.get('/metrics', { config: { access: 'operator' } }, async (_request, reply) => {
    const { contentType, body } = await metricsText();
    return reply.type(contentType).send(body);
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/admin/gift-cards',
    operationId: 'adminMintGiftCards',
    access: 'operator',
    tag: 'admin',
    summary: 'Mint gift cards (codes shown once)',
    status: 201,
    body: Obj({
      credits: Type.Integer({ minimum: 1, maximum: 100_000_000 }),
      count: Type.Integer({ minimum: 1, maximum: 1000 }),
      expiresAt: Type.Optional(Type.String({ minLength: 1, maxLength: 40, description: 'ISO 8601; checked by billing' })),
    }),
    response: Obj({ codes: Type.Array(Type.String()) }),
    handler: async ({ body, request, call }) =>
      billing.adminMintGiftCards(
        { adminToken: tokenOf(request), credits: body.credits, count: body.count, expiresAt: body.expiresAt ?? '' },
        call,
      ),
  });

  route(app, {
    method: 'PATCH',
    url: '/api/v1/admin/tenants/:id',
    operationId: 'adminSetTenantPlan',
    access: 'operator',
    tag: 'admin',
    summary: "Set a tenant's plan",
    params: Obj({ id: Str(1, 100) }),
    body: Obj({ plan: Type.Union(['free', 'starter', 'growth', 'enterprise'].map((p) => Type.Literal(p))) }),
    response: Obj({ tenantId: Type.String(), plan: Type.String() }),
    handler: async ({ body, params, request, call }) =>
      billing.adminSetPlan({ adminToken: tokenOf(request), tenantId: params.id, plan: body.plan }, call),
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/admin/tenants/:id/credits',
    operationId: 'adminAdjustCredits',
    access: 'operator',
    tag: 'admin',
    summary: "Adjust a tenant's credits (kept in the ledger)",
    params: Obj({ id: Str(1, 100) }),
    body: Obj({ delta: Type.Integer({ minimum: -100_000_000, maximum: 100_000_000 }), reason: Str(1, 500) }),
    response: Obj({ balance: Type.Integer() }),
    handler: async ({ body, params, request, call }) =>
      billing.adminAdjustCredits(
        { adminToken: tokenOf(request), tenantId: params.id, delta: body.delta, reason: body.reason, requestId: request.id },
        call,
      ),
  });
}
