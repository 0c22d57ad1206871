/** REQUIRE_VERIFIED_EMAIL's gate on the routes that call a model (lib/verified-email.ts says what it refuses). */
import type { FastifyInstance } from 'fastify';
import type { GatewayDeps } from '../deps';
import { assertEmailVerified } from '../lib/verified-email';

/** The gate on every route declared with `modelCall: true`. */
export function registerVerifiedEmailGate(app: FastifyInstance, deps: GatewayDeps): void {
  if (!deps.config.requireVerifiedEmail) return;
  app.addHook('preHandler', async (request) => {
    if (request.routeOptions.config.modelCall) await assertEmailVerified(deps, request.principal, request.id);
  });
}
