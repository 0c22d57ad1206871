import type { identityV1 } from '@svc/proto';
import type { ApiKeyDoc, TenantDoc, UserDoc } from '../collections';
import { toLimits } from '../key-limits';

/** Stored documents -> protobuf messages. Hashes and password hashes never leave the service. */
export function toUser(u: UserDoc): identityV1.User {
  return { id: u.id, email: u.email, name: u.name, createdAt: u.createdAt, emailVerified: u.emailVerified !== false };
}

export function toTenant(t: TenantDoc): identityV1.Tenant {
  return { id: t.id, name: t.name, plan: t.plan, createdAt: t.createdAt };
}

export function toApiKey(k: ApiKeyDoc): identityV1.ApiKey {
  return {
    id: k.id,
    name: k.name,
    type: k.type,
    environment: k.environment,
    scopes: k.scopes,
    scoped: k.scoped,
    start: k.start,
    createdAt: k.createdAt,
    lastUsedAt: k.lastUsedAt ?? undefined,
    expiresAt: k.expiresAt ?? undefined,
    limits: toLimits(k.limits),
  };
}

export function toMember(u: UserDoc): identityV1.Member {
  return { userId: u.id, email: u.email, name: u.name, role: u.role, joinedAt: u.createdAt };
}
