/**
 * REQUIRE_VERIFIED_EMAIL: a model call by a user who has not verified their email (or with a key such a user
 * created) is refused with 403 `email_not_verified`. Which requests are model calls is said where each is declared:
 * `modelCall: true` on a route (lib/route.ts, the pass-through's config) and on an MCP tool (routes/mcp.ts), so a
 * new one is covered where it is written (routes/model-calls.test.ts checks that the routes and tools that start
 * model calls carry it).
 *
 * The credential says "unverified" only as a hint (a token minted before the user opened the link still says so):
 * such a call asks identity once more, so a verification counts at once. A verified user's calls cost nothing more.
 */
import { errors } from '@svc/kit';
import type { GatewayDeps } from '../deps';
import type { Principal } from './principal';

/** Refuses a model call by `principal` with 403 `email_not_verified` while its user has not verified their email. */
export async function assertEmailVerified(deps: GatewayDeps, principal: Principal | null, requestId?: string): Promise<void> {
  if (!deps.config.requireVerifiedEmail || !principal?.emailUnverified) return;
  const me = await deps.clients.identity.getMe({}, { token: principal.token, requestId });
  if (!me.user?.emailVerified)
    throw errors.forbidden('Verify your email address first (see the email sent at sign-up)', { reason: 'email_not_verified' });
}
