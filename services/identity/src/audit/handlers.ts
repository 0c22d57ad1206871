import { type CallContext, DuplicateKeyError, errors, type ReceivedMessage, type Store } from '@svc/kit';
import { decodeDomainEvent } from '@svc/contracts';
import type { identityV1 } from '@svc/proto';
import type { IdentityDeps } from '../context';
import { requireManager } from '../handlers/team';
import type { ActorType, AuditEntryView } from './chain';
import { AUDIT_ACTIONS, type AuditAction, type AuditChainer, recordAudit } from './log';

const ID_SHAPE = /^[A-Za-z0-9_.:-]{1,100}$/;

/** An ISO time as entries store it (`toISOString`), or a validation error. */
function isoOf(field: string, value: string): string | undefined {
  if (!value) return undefined;
  const t = Date.parse(value);
  if (value.length > 40 || Number.isNaN(t)) throw errors.validation([{ field, message: 'must be an ISO 8601 time' }]);
  return new Date(t).toISOString();
}

function toProto(e: AuditEntryView): identityV1.AuditEntry {
  return {
    id: e.id,
    at: e.at,
    actor: { type: e.actor.type, id: e.actor.id, email: e.actor.email, keyPrefix: e.actor.keyPrefix },
    action: e.action,
    target: e.target,
    ip: e.ip ?? undefined,
    userAgent: e.userAgent ?? undefined,
    requestId: e.requestId ?? undefined,
    changesJson: JSON.stringify(e.changes),
    prevHash: e.prevHash ?? undefined,
    hash: e.hash,
  };
}

export function auditHandlers(deps: IdentityDeps) {
  return {
    async listAuditLog(req: identityV1.ListAuditLogRequest, ctx: CallContext): Promise<identityV1.ListAuditLogResponse> {
      const auth = requireManager(ctx);
      const fields: Array<{ field: string; message: string }> = [];
      if (req.actor && !ID_SHAPE.test(req.actor)) fields.push({ field: 'actor', message: 'must be an actor id' });
      if (req.action && !(AUDIT_ACTIONS as readonly string[]).includes(req.action))
        fields.push({ field: 'action', message: `must be one of ${AUDIT_ACTIONS.join(', ')}` });
      if (req.limit && (req.limit < 1 || req.limit > 100)) fields.push({ field: 'limit', message: 'must be from 1 to 100' });
      if (fields.length) throw errors.validation(fields);
      const page = await deps.audit.list(auth.tid, {
        actor: req.actor || undefined,
        action: req.action || undefined,
        after: isoOf('after', req.after),
        before: isoOf('before', req.before),
        limit: req.limit || 20,
        cursor: req.cursor || undefined,
      });
      return { entries: page.entries.map(toProto), nextCursor: page.nextCursor ?? '' };
    },

    async verifyAuditLog(_req: identityV1.VerifyAuditLogRequest, ctx: CallContext): Promise<identityV1.VerifyAuditLogResponse> {
      const auth = requireManager(ctx);
      const result = await deps.audit.verify(auth.tid);
      return { valid: result.valid, entries: result.entries, firstBrokenId: result.firstBrokenId ?? undefined };
    },
  };
}

const ACTOR_TYPES: readonly string[] = ['user', 'api_key', 'admin', 'system'] satisfies ActorType[];

/**
 * `audit.recorded` from another service's outbox (billing's operator actions): the same pending entry a change in
 * identity writes, under the id the record carries, so a redelivered event adds nothing.
 */
export function auditRecordedHandler(store: Store, chainer: AuditChainer) {
  return async (message: ReceivedMessage): Promise<void> => {
    const headerType = message.headers['event-type'];
    if (headerType !== undefined && headerType !== 'audit.recorded') return;
    const event = decodeDomainEvent(message.value);
    if (event.type !== 'audit.recorded' || event.data?.$case !== 'auditEntry' || !event.tenantId) return;
    const d = event.data.value;
    if (!(AUDIT_ACTIONS as readonly string[]).includes(d.action) || !d.actor || !ACTOR_TYPES.includes(d.actor.type) || !d.target) return;
    try {
      await store.transaction((tx) =>
        recordAudit(
          tx,
          { clientIp: d.ip || null, userAgent: d.userAgent || null, requestId: d.requestId || '' },
          {
            id: d.id || `aud_${event.id}`,
            at: d.at || event.createdAt,
            tenantId: event.tenantId,
            action: d.action as AuditAction,
            target: { type: d.target!.type, id: d.target!.id },
            changes: { before: d.changes?.before ?? null, after: d.changes?.after ?? null },
          },
          { type: d.actor!.type as ActorType, id: d.actor!.id },
        ),
      );
    } catch (err) {
      if (!(err instanceof DuplicateKeyError)) throw err;
    }
    chainer.kick();
  };
}
