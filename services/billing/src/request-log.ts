/**
 * The request log (CONTRACT.md 12): one entry per model call, written in the transaction that settles the call (the
 * ledger entry's, events.ts), so an entry exists exactly when the call was billed and its `credits` are the debit.
 * A call that released its reservation with no tokens gets one too (credits 0) when its sender described it. No
 * prompt or answer is kept. Entries older than REQUEST_LOG_RETENTION_DAYS are out of every read at once and deleted
 * by an hourly sweep, oldest first, in bounded batches (any number of replicas may sweep: a delete is idempotent).
 *
 * Indexes: a tenant's list with no filter, or with one of model, apiKeyId, source and status, pages from an index
 * whose fields are exactly its `where` (newest first on `at`, a window being a range on it), so a page's cost does
 * not grow with the log. Several filters at once page from one of those indexes and check the others per entry.
 */
import { createHash } from 'node:crypto';
import {
  errors,
  Retention,
  type CallContext,
  type CollectionDef,
  type Logger,
  type SortRange,
  type Store,
  type StoreSession,
} from '@svc/kit';
import { authed } from '@svc/contracts';
import type { billingV1, eventsV1 } from '@svc/proto';
import { toRequestLogEntry } from './views';

export const SOURCES = ['chat', 'agent', 'v1', 'passthrough', 'mcp'] as const;
export const STATUSES = ['ok', 'error', 'cancelled'] as const;
export type CallSource = (typeof SOURCES)[number];
export type CallStatus = (typeof STATUSES)[number];

export interface RequestLogDoc {
  /** Derived from the call's ledger source (tenant and call id): a redelivered settle can never add a second. */
  id: string;
  tenantId: string;
  /** When the call was settled (the ledger entry's createdAt): the list's order and its window. */
  at: string;
  source: CallSource;
  requestId: string;
  apiKeyId: string;
  userId: string;
  endUser: string;
  model: string;
  servedModel: string;
  provider: string;
  status: CallStatus;
  errorCode: string;
  inputTokens: number;
  outputTokens: number;
  credits: number;
  latencyMs: number;
  ttftMs: number;
}

export const requestLog: CollectionDef<RequestLogDoc> = {
  name: 'request_log',
  sortField: 'at',
  indexes: [
    { fields: ['tenantId'] },
    { fields: ['tenantId', 'model'] },
    { fields: ['tenantId', 'apiKeyId'] },
    { fields: ['tenantId', 'source'] },
    { fields: ['tenantId', 'status'] },
    // The retention sweep: oldest first, every tenant.
    { fields: [] },
  ],
};

const MAX_LIMIT = 100;
const END_USER_MAX = 200;

/** Usage of senders that describe no call, by its `source`: chat_reply -> chat, agent_run -> agent. */
const LEGACY_SOURCES: Record<string, CallSource> = { chat_reply: 'chat', agent_run: 'agent', passthrough: 'passthrough' };

/** The entry's id for a call's ledger source: the same call always gets the same id. */
export function requestLogId(tenantId: string, sourceKey: string): string {
  return `call_${createHash('sha256').update(`${tenantId}\n${sourceKey}`).digest('base64url').slice(0, 24)}`;
}

const oneOf = <T extends string>(list: readonly T[], value: string | undefined, fallback: T): T =>
  list.includes(value as T) ? (value as T) : fallback;
const count = (n: number | undefined) => (Number.isFinite(n) && n! > 0 ? Math.floor(n!) : 0);

/**
 * The entry of one model call, as `applyUsage` settles (or releases) it. `status` when the sender gave none: `ok`
 * for a billed call, `error` for a released one.
 */
export function requestLogEntry(
  u: eventsV1.UsageData,
  at: { id: string; tenantId: string; at: string; credits: number; defaultStatus: CallStatus },
): RequestLogDoc {
  const call = u.call;
  return {
    id: at.id,
    tenantId: at.tenantId,
    at: at.at,
    source: oneOf(SOURCES, call?.origin, LEGACY_SOURCES[u.source] ?? 'chat'),
    requestId: (call?.requestId ?? '').slice(0, 200),
    apiKeyId: u.credentialType === 'api_key' ? u.credentialId : '',
    userId: (call?.userId ?? '').slice(0, 100),
    endUser: (call?.endUser ?? '').slice(0, END_USER_MAX),
    model: u.model,
    // Older senders named the provider's model in `model`.
    servedModel: (call?.servedModel || (call ? '' : u.model)).slice(0, 200),
    provider: u.provider,
    status: oneOf(STATUSES, call?.status, at.defaultStatus),
    errorCode: (call?.errorCode ?? '').slice(0, 100),
    inputTokens: count(u.inputTokens),
    outputTokens: count(u.outputTokens),
    credits: at.credits,
    latencyMs: count(call?.latencyMs),
    ttftMs: count(call?.ttftMs),
  };
}

/** Writes a settled call's entry in the settle's transaction: one insert, nothing read. */
export async function logCall(tx: StoreSession, doc: RequestLogDoc): Promise<void> {
  await tx.collection(requestLog).insert(doc);
}

/** Writes a released call's entry unless an earlier delivery of its release wrote it. */
export async function logReleasedCall(tx: StoreSession, doc: RequestLogDoc): Promise<void> {
  if (!(await tx.collection(requestLog).get(doc.id))) await tx.collection(requestLog).insert(doc);
}

export interface RequestLogQuery {
  tenantId: string;
  from?: string;
  to?: string;
  model?: string;
  apiKeyId?: string;
  source?: CallSource;
  status?: CallStatus;
  limit: number;
  cursor: string | null;
}

const ISO = /^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?)?$/;

/** The request's filters, or a 400 naming every bad one. */
export function parseRequestLogQuery(tenantId: string, req: billingV1.ListRequestsRequest): RequestLogQuery {
  const fields: Array<{ field: string; message: string }> = [];
  const time = (field: 'from' | 'to') => {
    if (!req[field]) return undefined;
    const ms = ISO.test(req[field]) ? Date.parse(req[field]) : NaN;
    if (Number.isNaN(ms)) fields.push({ field, message: 'must be an ISO 8601 date-time' });
    return Number.isNaN(ms) ? undefined : new Date(ms).toISOString();
  };
  const from = time('from');
  const to = time('to');
  if (from && to && to <= from) fields.push({ field: 'to', message: 'must be after from' });
  const text = (field: 'model' | 'apiKeyId', max: number) => {
    if (req[field].length > max) fields.push({ field, message: `must be at most ${max} characters` });
    return req[field] || undefined;
  };
  const model = text('model', 200);
  const apiKeyId = text('apiKeyId', 100);
  const listed = <T extends string>(field: 'source' | 'status', list: readonly T[]) => {
    if (!req[field]) return undefined;
    if (!list.includes(req[field] as T)) fields.push({ field, message: `must be one of ${list.join(', ')}` });
    return req[field] as T;
  };
  const source = listed('source', SOURCES);
  const status = listed('status', STATUSES);
  const limit = req.limit || 20;
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) fields.push({ field: 'limit', message: `must be 1 to ${MAX_LIMIT}` });
  if (fields.length) throw errors.validation(fields);
  return { tenantId, from, to, model, apiKeyId, source, status, limit, cursor: req.cursor || null };
}

export class RequestLog {
  private readonly retention: Retention<RequestLogDoc>;

  constructor(
    private readonly store: Store,
    o: { retentionDays: number; logger: Logger; now?: () => number },
  ) {
    this.retention = new Retention(store, requestLog, { ...o, label: 'request log' });
  }

  /** The oldest `at` still kept (exclusive). */
  cutoff(): string {
    return this.retention.cutoff();
  }

  /** The tenant's entry, unless past the retention; another tenant's is null, like a missing one. */
  async get(tenantId: string, id: string): Promise<RequestLogDoc | null> {
    const doc = id ? await this.store.collection(requestLog).get(id, { tenantId }) : null;
    return doc && doc.at > this.cutoff() ? doc : null;
  }

  /** A page of the tenant's entries, newest first, within the retention and the window `from <= at < to`. */
  list(q: RequestLogQuery) {
    const where: Partial<Record<'tenantId' | 'model' | 'apiKeyId' | 'source' | 'status', string>> = { tenantId: q.tenantId };
    for (const field of ['model', 'apiKeyId', 'source', 'status'] as const) if (q[field] !== undefined) where[field] = q[field];
    const cutoff = this.cutoff();
    const range: SortRange = q.from && q.from > cutoff ? { gte: q.from } : { gt: cutoff };
    if (q.to) range.lt = q.to;
    return this.store.collection(requestLog).find(where as Partial<RequestLogDoc>, { limit: q.limit, cursor: q.cursor, range });
  }

  /** Deletes every record past the retention; returns how many. */
  sweep(): Promise<number> {
    return this.retention.sweep();
  }

  /** Sweeps now and then hourly, until stopped. */
  start(): void {
    this.retention.start();
  }

  stop(): Promise<void> {
    return this.retention.stop();
  }
}

export function requestLogHandlers(log: RequestLog) {
  return {
    async listRequests(req: billingV1.ListRequestsRequest, ctx: CallContext): Promise<billingV1.ListRequestsResponse> {
      const { auth } = authed(ctx, 'billing:read');
      const page = await log.list(parseRequestLogQuery(auth.tid, req));
      return { entries: page.items.map(toRequestLogEntry), nextCursor: page.nextCursor ?? '' };
    },

    async getRequest(req: billingV1.GetRequestRequest, ctx: CallContext): Promise<billingV1.GetRequestResponse> {
      const { auth } = authed(ctx, 'billing:read');
      const doc = await log.get(auth.tid, req.id);
      if (!doc) throw errors.notFound('request', req.id);
      return { entry: toRequestLogEntry(doc) };
    },
  };
}
