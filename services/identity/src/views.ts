import type { identityV1 } from '@svc/proto';
import type { ApiKeyDoc, InvitationDoc, SecretDoc, TenantDoc, UserDoc } from './collections';
import { toLimits } from './key-limits';
import { hasExpired } from './one-time-links';

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

export function toInvitation(d: InvitationDoc): identityV1.Invitation {
  const status = d.status === 'pending' && hasExpired(d.expiresAt) ? 'expired' : d.status;
  return { id: d.id, email: d.email, role: d.role, expiresAt: d.expiresAt, status, createdAt: d.createdAt };
}

export function toSecret(d: SecretDoc): identityV1.Secret {
  return { name: d.name, description: d.description, version: d.version, createdAt: d.createdAt, updatedAt: d.updatedAt };
}
