import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { identityV1 } from '@svc/proto';
import type { GatewayDeps } from '../deps';
import { pageOf, route } from '../lib/route';
import { Nullable, Obj, Str, Timestamp } from '../schemas';

const Actor = Obj({
  type: Type.Union(['user', 'api_key', 'admin', 'system'].map((t) => Type.Literal(t))),
  id: Type.String(),
  email: Type.Optional(Type.String()),
  keyPrefix: Type.Optional(Type.String({ description: 'First 12 characters of the acting API key (never the key)' })),
});

const AuditEntry = Obj({
  id: Type.String(),
  at: Timestamp,
  actor: Actor,
  action: Type.String({ description: 'Dotted name: api_key.created, member.role_changed, session.signed_in, ...' }),
  target: Obj({ type: Type.String(), id: Type.String() }),
  ip: Nullable(Type.String()),
  userAgent: Nullable(Type.String()),
  requestId: Nullable(Type.String()),
  changes: Obj(
    { before: Type.Unknown(), after: Type.Unknown() },
    'What the action changed; secret values, keys and passwords are never shown',
  ),
  prevHash: Nullable(Type.String({ description: "The previous entry's hash (null for a chain's first entry)" })),
  hash: Type.String({ description: "SHA-256 (hex) of the entry's canonical JSON (sorted keys, no spaces) without `hash`" }),
});

const AuditQuery = Obj({
  actor: Type.Optional(Str(1, 100, { description: 'Actor id (a user id, an API key id, operator, identity)' })),
  action: Type.Optional(Str(1, 64)),
  after: Type.Optional(Str(1, 40, { description: 'ISO 8601 time, exclusive' })),
  before: Type.Optional(Str(1, 40, { description: 'ISO 8601 time, exclusive' })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20 })),
  cursor: Type.Optional(Str(1, 512)),
});

/** An entry as the API shows it: the object its `hash` covers (with `hash`). */
export function auditEntryView(e: identityV1.AuditEntry) {
  const actor: Record<string, string> = { type: e.actor?.type ?? 'system', id: e.actor?.id ?? '' };
  if (e.actor?.email !== undefined) actor.email = e.actor.email;
  if (e.actor?.keyPrefix !== undefined) actor.keyPrefix = e.actor.keyPrefix;
  return {
    id: e.id,
    at: e.at,
    actor,
    action: e.action,
    target: { type: e.target?.type ?? '', id: e.target?.id ?? '' },
    ip: e.ip ?? null,
    userAgent: e.userAgent ?? null,
    requestId: e.requestId ?? null,
    changes: JSON.parse(e.changesJson || '{"before":null,"after":null}') as unknown,
    prevHash: e.prevHash ?? null,
    hash: e.hash,
  };
}

/** The tenant's audit log (CONTRACT.md 10): read-only; other methods on these paths answer 405. */
export function auditRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { identity } = deps.clients;

  route(app, {
    method: 'GET',
    url: '/api/v1/audit-log',
    operationId: 'listAuditLog',
    access: 'audit:read',
    tag: 'audit',
    summary: "The tenant's audit log, newest first (owner or admin; a limited key needs audit:read)",
    query: AuditQuery,
    list: true,
    response: AuditEntry,
    handler: async ({ query, call }) => {
      const limit = query.limit ?? 20;
      const res = await identity.listAuditLog(
        {
          actor: query.actor ?? '',
          action: query.action ?? '',
          after: query.after ?? '',
          before: query.before ?? '',
          limit,
          cursor: query.cursor ?? '',
        },
        call,
      );
      return pageOf(res.entries.map(auditEntryView), limit, res.nextCursor);
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/audit-log/verify',
    operationId: 'verifyAuditLog',
    access: 'audit:read',
    tag: 'audit',
    summary: "Recomputes the tenant's hash chain from its oldest kept entry",
    response: Obj({
      valid: Type.Boolean(),
      entries: Type.Integer({ description: 'How many entries were checked' }),
      firstBrokenId: Nullable(Type.String({ description: 'The first entry whose hash or link does not hold' })),
    }),
    handler: async ({ call }) => {
      const res = await identity.verifyAuditLog({}, call);
      return { valid: res.valid, entries: res.entries, firstBrokenId: res.firstBrokenId ?? null };
    },
  });
}
