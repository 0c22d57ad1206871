import { errors, type AuthedContext, type CallContext } from '@svc/kit';
import type { Scope } from './scopes';

/**
 * The caller of a protected method, with the scope it needs checked here as well as at the gateway: tokens also
 * reach services without passing the gateway's policy (delegated tokens of background work, peers calling on a
 * caller's behalf), and a token limited to some scopes must be limited everywhere.
 */
export function authed(ctx: CallContext, scope?: Scope | 'unscoped'): AuthedContext {
  if (!ctx.auth || !ctx.token) throw errors.unauthorized();
  const granted = ctx.auth.scp;
  if (scope === undefined || granted === undefined) return ctx as AuthedContext;
  // Tenant settings, team, security, webhooks: only a credential without a scope list (CONTRACT.md 3).
  if (scope === 'unscoped') throw errors.unscopedRequired();
  if (!granted.includes(scope)) throw errors.missingScope(scope);
  return ctx as AuthedContext;
}
