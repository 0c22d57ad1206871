/**
 * The audit log (CONTRACT.md 10, docs/decisions.md "Audit log").
 *
 * - Recording: a change writes an `audit_pending` document in the same transaction as itself (identity's changes), or
 *   its service puts an `audit.recorded` event in its outbox in the change's transaction (billing's operator
 *   actions), which identity turns into the same pending document (idempotent: the entry id comes with it). So no
 *   change commits without its entry.
 * - Chaining: any replica appends pending entries to their tenant's chain. An append is one transaction that reads
 *   the tenant's head (`audit_heads`: last seq and hash), inserts the entry with seq + 1 and prevHash = the head's
 *   hash, moves the head with a compare-and-set on its seq, and deletes the pending document. Of two replicas
 *   appending at once one loses the compare-and-set (or the unique (tenantId, seq)) and retries from the new head:
 *   one unbroken chain per tenant, resting on the store alone (no lease, no process, no clock).
 * - Time: `at` is the change's time, raised to the previous entry's `at` when a replica's clock lags, so the log's
 *   time order is its chain order (the list sorts on `order` = at + seq).
 * - Retention: entries older than AUDIT_RETENTION_DAYS are deleted oldest first; the chain then starts at the oldest
 *   kept entry, whose prevHash is the hash of the last deleted one, which the head keeps (`prunedSeq`, `prunedHash`):
 *   verification checks the kept chain from there, so entries cut from its start, middle or end all show.
 */
import {
  type CallContext,
  type CollectionDef,
  DuplicateKeyError,
  errors,
  addToOutbox,
  type Logger,
  newId,
  type OutboxRelay,
  nowIso,
  pages,
  type Store,
  type StoreSession,
} from '@svc/kit';
import { domainEvent, TOPICS } from '@svc/contracts';
import {
  type AuditActor,
  type AuditChanges,
  type AuditEntryView,
  type AuditTarget,
  ChainVerifier,
  entryHash,
  redact,
  viewOf,
  type VerifyResult,
} from './chain';
import type { eventsV1 } from '@svc/proto';
import { apiKeys, users } from '../collections';

export interface AuditPendingDoc {
  id: string;
  tenantId: string;
  at: string;
  actor: AuditActor;
  action: string;
  target: AuditTarget;
  ip: string | null;
  userAgent: string | null;
  requestId: string | null;
  changes: AuditChanges;
  createdAt: string;
}

export interface AuditEntryDoc extends AuditEntryView {
  tenantId: string;
  seq: number;
  /** Sort key: `at` then the zero-padded seq (time order is chain order). */
  order: string;
  actorId: string;
}

export interface AuditHeadDoc {
  /** The tenant id. */
  id: string;
  seq: number;
  hash: string;
  at: string;
  /** The last entry retention deleted (absent before the first): where the kept chain must start. */
  prunedSeq?: number;
  prunedHash?: string;
}

// Chained in the order of the changes' times (ties by id): a replica's own entries in the order it made them.
export const auditPending: CollectionDef<AuditPendingDoc> = {
  name: 'audit_pending',
  sortField: 'at',
  indexes: [{ fields: [] }, { fields: ['tenantId'] }],
};
export const auditLog: CollectionDef<AuditEntryDoc> = {
  name: 'audit_log',
  sortField: 'order',
  indexes: [
    { fields: [] },
    { fields: ['tenantId'] },
    { fields: ['tenantId', 'actorId'] },
    { fields: ['tenantId', 'action'] },
    { fields: ['tenantId', 'actorId', 'action'] },
    { fields: ['tenantId', 'seq'], unique: true },
  ],
};
export const auditHeads: CollectionDef<AuditHeadDoc> = { name: 'audit_heads', sortField: 'id' };

export const AUDIT_COLLECTIONS: Array<CollectionDef<any>> = [auditPending, auditLog, auditHeads];

export const AUDIT_ACTIONS = [
  'api_key.created',
  'api_key.rotated',
  'api_key.revoked',
  'api_key.limits_changed',
  'member.added',
  'member.removed',
  'member.role_changed',
  'invitation.created',
  'invitation.revoked',
  'invitation.accepted',
  'password.reset',
  'network.allowlist_changed',
  'secret.created',
  'secret.versioned',
  'secret.deleted',
  'llm_settings.changed',
  'model.created',
  'model.updated',
  'model.deleted',
  'session.signed_in',
  'session.signed_out',
  'session.sign_in_failed',
  'session.refresh_reuse_detected',
  'cli_login.approved',
  'cli_login.denied',
  'admin.plan_changed',
  'admin.credits_adjusted',
] as const;
export type AuditAction = (typeof AUDIT_ACTIONS)[number];

export interface AuditRecord {
  tenantId: string;
  action: AuditAction;
  target: AuditTarget;
  changes?: { before?: unknown; after?: unknown };
  actor?: AuditActor;
  /** The entry id when the record arrives from elsewhere (idempotency); a new one otherwise. */
  id?: string;
  at?: string;
}

/** The actor of a call: the signed-in user (also through the CLI), or the API key. */
export function actorOf(ctx: CallContext, extra?: { email?: string; keyPrefix?: string }): AuditActor {
  const auth = ctx.auth;
  if (!auth) return { type: 'system', id: 'system' };
  if (auth.typ === 'api_key') return { type: 'api_key', id: auth.sid, ...(extra?.keyPrefix ? { keyPrefix: extra.keyPrefix } : {}) };
  return { type: 'user', id: auth.sub, ...(extra?.email ? { email: extra.email } : {}) };
}

/** Writes the entry to be chained, inside the change's transaction. */
export async function recordAudit(
  tx: StoreSession,
  ctx: Pick<CallContext, 'clientIp' | 'requestId' | 'userAgent'> | null,
  record: AuditRecord,
  actor: AuditActor,
): Promise<void> {
  const now = nowIso();
  await tx.collection(auditPending).insert({
    id: record.id ?? newId('aud'),
    tenantId: record.tenantId,
    at: record.at ?? now,
    actor: redact(actor) as AuditActor,
    action: record.action,
    target: record.target,
    ip: ctx?.clientIp ?? null,
    userAgent: ctx?.userAgent ?? null,
    requestId: ctx?.requestId || null,
    changes: redact({ before: record.changes?.before ?? null, after: record.changes?.after ?? null }) as AuditChanges,
    createdAt: now,
  });
}

const SEQ_WIDTH = 12;

/** Appends pending entries to their tenants' chains; safe to run on every replica at once. */
export class AuditChainer {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private again = false;

  constructor(
    private readonly store: Store,
    private readonly logger: Logger,
    private readonly retentionDays: number,
    private readonly relay: Pick<OutboxRelay, 'notify'> | null = null,
  ) {}

  private pruneTimer: NodeJS.Timeout | null = null;
  private halted = false;

  private unwake: (() => void) | null = null;

  /**
   * Chains what other replicas record when the store reports their commits (`wake`: a write notice on SQLite, a change
   * stream on MongoDB), with a slow safety poll beside it; an idle service wakes rarely. Prunes past the retention
   * hourly.
   */
  start(wake?: (hint: () => void) => () => void, safetyPollMs = 5000): void {
    this.unwake = wake?.(() => this.kick()) ?? null;
    this.timer = setInterval(() => this.kick(), wake ? safetyPollMs : 250);
    this.timer.unref();
    const prune = () => void this.prune().catch((err: unknown) => this.logger.warn({ err }, 'audit retention failed'));
    this.pruneTimer = setInterval(prune, 3_600_000);
    this.pruneTimer.unref();
    prune();
  }

  /** Stops new work (before the store closes). */
  halt(): void {
    this.halted = true;
    this.unwake?.();
    this.unwake = null;
    if (this.timer) clearInterval(this.timer);
    if (this.pruneTimer) clearInterval(this.pruneTimer);
    this.timer = this.pruneTimer = null;
  }

  async stop(): Promise<void> {
    this.halt();
    await this.running;
  }

  /** Chains what is pending soon (coalesced). */
  kick(): void {
    if (this.halted) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = (async () => {
      do {
        this.again = false;
        await this.drain(null).catch((err: unknown) => this.logger.warn({ err }, 'audit chaining failed; retried'));
      } while (this.again);
    })().finally(() => {
      this.running = null;
    });
  }

  /** Chains every pending entry (of one tenant, or of all). */
  async drain(tenantId: string | null): Promise<void> {
    const pending = this.store.collection(auditPending);
    for (let round = 0; round < 100; round++) {
      const page = await pending.find(tenantId ? { tenantId } : {}, { order: 'asc', limit: 100 });
      if (page.items.length === 0) return;
      for (const p of page.items) await this.append(p);
    }
  }

  private async append(p: AuditPendingDoc): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        const done = await this.store.transaction(async (tx) => {
          const entries = tx.collection(auditLog);
          const heads = tx.collection(auditHeads);
          if (!(await tx.collection(auditPending).get(p.id))) return true; // chained by another replica
          if (await entries.get(p.id)) {
            await tx.collection(auditPending).delete(p.id);
            return true;
          }
          const head = await heads.get(p.tenantId);
          const seq = (head?.seq ?? 0) + 1;
          const at = head && head.at > p.at ? head.at : p.at;
          const view: Omit<AuditEntryView, 'hash'> = {
            id: p.id,
            at,
            actor: p.actor,
            action: p.action,
            target: p.target,
            ip: p.ip,
            userAgent: p.userAgent,
            requestId: p.requestId,
            changes: p.changes,
            prevHash: head?.hash ?? null,
          };
          const hash = entryHash(view);
          await entries.insert({
            ...view,
            hash,
            tenantId: p.tenantId,
            seq,
            order: `${at}~${String(seq).padStart(SEQ_WIDTH, '0')}`,
            actorId: p.actor.id,
          });
          if (head) {
            if (!(await heads.update(p.tenantId, { seq: head.seq }, { seq, hash, at }))) return false;
          } else await heads.insert({ id: p.tenantId, seq, hash, at });
          await tx.collection(auditPending).delete(p.id);
          // Exported for tenants who ship their log to a SIEM (a webhook of audit.entry_created).
          await addToOutbox(
            tx,
            domainEvent(TOPICS.identity, 'audit.entry_created', p.tenantId, { $case: 'auditEntry', value: eventDataOf({ ...view, hash }) }),
          );
          return true;
        });
        if (done) {
          this.relay?.notify();
          return;
        }
      } catch (err) {
        if (!(err instanceof DuplicateKeyError) && !isWriteConflict(err)) throw err;
      }
      if (attempt >= 50) throw new Error('audit chain: too many conflicts');
      await new Promise((r) => setTimeout(r, Math.random() * 5 * (attempt + 1)));
    }
  }

  /** Deletes the entries older than the retention, oldest first (their heads stay: the chain goes on from them). */
  async prune(now = Date.now()): Promise<number> {
    const cutoff = new Date(now - this.retentionDays * 86_400_000).toISOString();
    const col = this.store.collection(auditLog);
    let deleted = 0;
    for (;;) {
      const page = await col.find({}, { order: 'asc', limit: 200 });
      const old = page.items.filter((e) => e.at < cutoff);
      for (const e of old) {
        const gone = await this.store.transaction(async (tx) => {
          if (!(await tx.collection(auditLog).delete(e.id))) return false;
          // The head remembers where the kept chain starts, so entries cut from the start show as well.
          const head = await tx.collection(auditHeads).get(e.tenantId);
          if (head && (head.prunedSeq ?? 0) < e.seq)
            await tx.collection(auditHeads).update(e.tenantId, {}, { prunedSeq: e.seq, prunedHash: e.hash });
          return true;
        });
        if (gone) deleted++;
      }
      if (old.length < page.items.length || page.items.length === 0) return deleted;
    }
  }

  async list(
    tenantId: string,
    q: { actor?: string; action?: string; after?: string; before?: string; limit?: number; cursor?: string },
  ): Promise<{ entries: AuditEntryView[]; nextCursor: string | null }> {
    await this.drain(tenantId);
    const where: { tenantId: string; actorId?: string; action?: string } = { tenantId };
    if (q.actor) where.actorId = q.actor;
    if (q.action) where.action = q.action;
    const limit = q.limit || 20;
    // `before` (exclusive) starts the page at that time: every order key of an entry at that time sorts after the
    // bare time, so a cursor on (before, '') skips them.
    const cursor = q.cursor || (q.before ? Buffer.from(JSON.stringify([q.before, ''])).toString('base64url') : null);
    const page = await this.store.collection(auditLog).find(where, { limit, cursor });
    let items = page.items;
    let nextCursor = page.nextCursor;
    if (q.after) {
      const kept = items.filter((e) => e.at > q.after!);
      if (kept.length < items.length) nextCursor = null;
      items = kept;
    }
    return { entries: items.map(viewOf), nextCursor };
  }

  async verify(tenantId: string): Promise<VerifyResult> {
    await this.drain(tenantId);
    const head = await this.store.collection(auditHeads).get(tenantId);
    const col = this.store.collection(auditLog);
    const verifier = new ChainVerifier();
    let lastId: string | null = null;
    let lastSeq: number | null = null;
    let seqGap: string | null = null;
    let startBroken: string | null = null;
    for await (const page of pages(col, { tenantId }, { order: 'asc', limit: 500 }))
      for (const e of page) {
        // The oldest kept entry follows the last one retention deleted (or starts the chain).
        if (lastSeq === null && (e.seq !== (head?.prunedSeq ?? 0) + 1 || e.prevHash !== (head?.prunedHash ?? null))) startBroken = e.id;
        if (lastSeq !== null && e.seq !== lastSeq + 1 && !seqGap) seqGap = e.id;
        verifier.add(e);
        lastId = e.id;
        lastSeq = e.seq;
      }
    // With every entry dropped by retention nothing is left to check; entries missing otherwise have no id to name.
    if (lastId === null) return { valid: !head || head.seq === (head.prunedSeq ?? 0), entries: 0, firstBrokenId: null };
    const result = verifier.result(head?.hash ?? null, lastId);
    // The first break in chain order: the start, else the first bad hash, link or gap in seq.
    const first = startBroken ?? (result.valid ? seqGap : result.firstBrokenId);
    if (first) return { ...result, valid: false, firstBrokenId: first };
    return result;
  }
}

function isWriteConflict(err: unknown): boolean {
  const e = err as { code?: number | string; errorLabels?: string[]; hasErrorLabel?: (l: string) => boolean };
  return (
    e?.code === 112 ||
    e?.code === 'SQLITE_BUSY' ||
    Boolean(e?.hasErrorLabel?.('TransientTransactionError')) ||
    Boolean(e?.errorLabels?.includes('TransientTransactionError'))
  );
}

export function checkAuditQuery(q: { after?: string; before?: string; action?: string; actor?: string }): void {
  const bad: Array<{ field: string; message: string }> = [];
  for (const f of ['after', 'before'] as const) {
    const v = q[f];
    if (v && Number.isNaN(Date.parse(v))) bad.push({ field: f, message: 'must be an ISO 8601 time' });
  }
  if (bad.length) throw errors.validation(bad);
}

/** Shorthand for a handler: the call's actor, address, user agent and request id. */
export function auditChange(
  tx: StoreSession,
  ctx: CallContext,
  tenantId: string,
  action: AuditAction,
  target: AuditTarget,
  changes?: { before?: unknown; after?: unknown },
  actor?: AuditActor,
): Promise<void> {
  return (async () => recordAudit(tx, ctx, { tenantId, action, target, changes }, actor ?? (await actorWithDetails(tx, ctx))))();
}

/** The call's actor with the user's email or the key's prefix (read in the change's transaction). */
export async function actorWithDetails(tx: StoreSession, ctx: CallContext): Promise<AuditActor> {
  const actor = actorOf(ctx);
  if (actor.type === 'user') {
    const user = await tx.collection(users).get(actor.id);
    if (user) actor.email = user.email;
  } else if (actor.type === 'api_key') {
    const key = await tx.collection(apiKeys).get(actor.id);
    if (key) actor.keyPrefix = key.start;
  }
  return actor;
}

/** An entry as the `audit.entry_created` event (and billing's `audit.recorded`) carries it: as the API shows it. */
export function eventDataOf(
  e: Omit<AuditEntryView, 'prevHash' | 'hash'> & { prevHash?: string | null; hash?: string },
): eventsV1.AuditEntryData {
  const struct = (v: unknown) => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined);
  return {
    id: e.id,
    at: e.at,
    actor: { type: e.actor.type, id: e.actor.id, email: e.actor.email, keyPrefix: e.actor.keyPrefix },
    action: e.action,
    target: { type: e.target.type, id: e.target.id },
    ip: e.ip ?? undefined,
    userAgent: e.userAgent ?? undefined,
    requestId: e.requestId ?? undefined,
    changes: { before: struct(e.changes.before), after: struct(e.changes.after) },
    prevHash: e.prevHash ?? undefined,
    hash: e.hash ?? '',
  };
}
