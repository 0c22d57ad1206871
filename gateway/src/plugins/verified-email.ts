/**
 * REQUIRE_VERIFIED_EMAIL (CONTRACT.md 13): a model call by a user who has not verified their email (or with a key
 * such a user created) is refused with 403 `email_not_verified`. The credential says "unverified" only as a hint
 * (a token minted before the user opened the link still says so): such a call asks identity once more, so a
 * verification counts at once. A verified user's calls cost nothing more.
 */
import type { FastifyInstance } from 'fastify';
import { errors } from '@svc/kit';
import type { GatewayDeps } from '../deps';
import { PASSTHROUGH_PREFIX } from '../routes/passthrough';

/** The routes that call a model (method and route pattern). */
const MODEL_CALLS = new Set([
  'POST /api/v1/chat/sessions/:id/messages',
  'POST /api/v1/agents/:id/execute',
  'POST /v1/chat/completions',
  'POST /v1/responses',
  'POST /v1/embeddings',
]);

const isModelCall = (method: string, url: string | undefined) =>
  url !== undefined && (MODEL_CALLS.has(`${method} ${url}`) || url.startsWith(PASSTHROUGH_PREFIX));

export function registerVerifiedEmailGate(app: FastifyInstance, deps: GatewayDeps): void {
  if (!deps.config.requireVerifiedEmail) return;
  app.addHook('preHandler', async (request) => {
    const p = request.principal;
    if (!p?.emailUnverified || !isModelCall(request.method, request.routeOptions.url)) return;
    const me = await deps.clients.identity.getMe({}, { token: p.token, requestId: request.id });
    if (!me.user?.emailVerified)
      throw errors.forbidden('Verify your email address first (see the email sent at sign-up)', { reason: 'email_not_verified' });
  });
}
