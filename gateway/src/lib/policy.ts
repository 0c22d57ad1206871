import { AppError, errors } from '@svc/kit';
import type { Role, Scope } from '@svc/contracts';
import type { Principal } from './principal';

/**
 * Who may call what: the one table of access rules (CONTRACT.md 3, "Scopes required"). Routes name a policy;
 * nothing else decides access.
 */
export interface Policy {
  /** False: no credential needed. */
  authenticate: boolean;
  /** A scoped key needs this scope. */
  scope?: Scope;
  /** Refuse credentials that carry a scope list (tenant settings, team, security, webhooks, regions). */
  unscoped?: boolean;
  roles?: readonly Role[];
  /** Credential kinds allowed (API keys are refused where only a person should act). */
  credentials?: ReadonlyArray<Principal['type']>;
  /** Only an API key authenticates here (the OpenAI-compatible /v1): any other credential is 401 (CONTRACT.md 9). */
  apiKeyOnly?: boolean;
}

const MANAGERS = ['owner', 'admin'] as const;

export const POLICIES = {
  public: { authenticate: false },
  /** The operator API: the bearer must be SVC_ADMIN_TOKEN, checked by the route itself (gateway/src/routes/admin.ts). */
  operator: { authenticate: false },
  authenticated: { authenticate: true },
  'projects:read': { authenticate: true, scope: 'projects:read' },
  'projects:write': { authenticate: true, scope: 'projects:write' },
  'agents:read': { authenticate: true, scope: 'agents:read' },
  'agents:write': { authenticate: true, scope: 'agents:write' },
  'secrets:read': { authenticate: true, scope: 'secrets:read' },
  'secrets:write': { authenticate: true, scope: 'secrets:write' },
  'billing:read': { authenticate: true, scope: 'billing:read' },
  'events:read': { authenticate: true, scope: 'events:read' },
  'billing:write': { authenticate: true, scope: 'billing:write', roles: MANAGERS },
  /** Billing settings an owner or admin reads (alerts): a scoped key needs billing:read. */
  'billing:read:manager': { authenticate: true, scope: 'billing:read', roles: MANAGERS },
  /** The audit log (CONTRACT.md 10): owners and admins; a scoped key needs audit:read. */
  'audit:read': { authenticate: true, scope: 'audit:read', roles: MANAGERS },
  unscoped: { authenticate: true, unscoped: true },
  manager: { authenticate: true, unscoped: true, roles: MANAGERS },
  sessionManager: { authenticate: true, unscoped: true, roles: MANAGERS, credentials: ['user', 'cli'] },
  /** `/v1`, the OpenAI-compatible API: API keys only, with the llm:use scope or none. */
  'llm:use': { authenticate: true, scope: 'llm:use', apiKeyOnly: true },
  'llm:passthrough': { authenticate: true, scope: 'llm:passthrough', apiKeyOnly: true },
  /** `/mcp`: API keys only; each tool checks its own scope (gateway/src/routes/mcp.ts). */
  mcp: { authenticate: true, apiKeyOnly: true },
} as const satisfies Record<string, Policy>;

export type PolicyName = keyof typeof POLICIES;

export function authorize(policy: Policy, p: Principal): void {
  if (policy.apiKeyOnly && p.type !== 'api_key')
    throw new AppError('UNAUTHORIZED', 'This API takes a tenant API key as "Authorization: Bearer <key>"', { reason: 'api_key_required' });
  if (policy.credentials && !policy.credentials.includes(p.type))
    throw new AppError('FORBIDDEN', 'This needs a signed-in user session, not an API key', { reason: 'user_session_required' });
  if (p.scopes !== undefined) {
    if (policy.unscoped) throw errors.unscopedRequired();
    if (policy.scope && !p.scopes.includes(policy.scope)) throw errors.missingScope(policy.scope);
  }
  if (policy.roles && !policy.roles.includes(p.role))
    throw new AppError('FORBIDDEN', 'This needs the owner or admin role', { reason: 'role_required', requiredRoles: policy.roles });
}
