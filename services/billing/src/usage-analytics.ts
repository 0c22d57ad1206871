/**
 * Usage analytics (CONTRACT.md 8, `GET /billing/usage`): a tenant's model calls in a window, bucketed by UTC hour or
 * day and grouped by any of model, API key, project and agent.
 *
 * Exact by construction: each usage entry of the ledger adds itself to an hour rollup and a day rollup of its
 * (model, key, project, agent), in the transaction that adds the entry (events.ts), so rollups change only with
 * the ledger. A window is cut into the whole days the day rollups cover, the whole hours the hour rollups cover,
 * and at most two partial hours at its ends, read from the ledger's entries of those hours (`from <= at < to` to
 * the millisecond). A month by day reads about 31 rollups per group instead of every entry (bench/usage.ts).
 */
import { createHash } from 'node:crypto';
import { errors, type CallContext, type CollectionDef, type Store, type StoreSession } from '@svc/kit';
import { authed } from '@svc/contracts';
import type { billingV1 } from '@svc/proto';
import { ledger, type EntryDoc } from './collections';
import { addToCounter } from './counters';
import type { Tally } from './tally';

export type Unit = 'hour' | 'day';

export interface UsageRollupDoc {
  /** Hash of (tenant, unit, start, model, apiKeyId, projectId, agentId). */
  id: string;
  tenantId: string;
  unit: Unit;
  /** Start of the hour or day (ISO). */
  start: string;
  /** What a window's read looks a rollup up by: its day (`YYYY-MM-DD`) for hours, its month (`YYYY-MM`) for days. */
  period: string;
  model: string;
  apiKeyId: string;
  projectId: string;
  agentId: string;
  calls: number;
  inputTokens: number;
  outputTokens: number;
  credits: number;
}

export const usageRollups: CollectionDef<UsageRollupDoc> = {
  name: 'usage_rollups',
  sortField: 'start',
  indexes: [{ fields: ['tenantId', 'unit', 'period'] }],
};

const HOUR = 3600_000;
const DAY = 24 * HOUR;
const MAX_SPAN = 366 * DAY;
export const MAX_ROWS = 10_000;
const GROUPS = { model: 'model', apiKey: 'apiKeyId', project: 'projectId', agent: 'agentId' } as const;
type Group = keyof typeof GROUPS;
type Dim = (typeof GROUPS)[Group];
const DIMS: Dim[] = ['model', 'apiKeyId', 'projectId', 'agentId'];

const floorTo = (ms: number, unit: number) => Math.floor(ms / unit) * unit;
const ceilTo = (ms: number, unit: number) => Math.ceil(ms / unit) * unit;
const iso = (ms: number) => new Date(ms).toISOString();

/**
 * Adds a usage entry to its hour and day rollups, in the entry's transaction: in `tally` when given (written at its
 * flush, summed with the transaction's other entries), else at once. Other entries are left out.
 */
export async function recordUsageRollups(tx: StoreSession, entry: EntryDoc, tally?: Tally): Promise<void> {
  const u = entry.usage;
  if (!u || entry.kind !== 'usage') return;
  const at = Date.parse(entry.createdAt);
  const col = tx.collection(usageRollups);
  const by = { calls: 1, inputTokens: u.inputTokens, outputTokens: u.outputTokens, credits: -entry.credits };
  for (const unit of ['hour', 'day'] as const) {
    const start = iso(floorTo(at, unit === 'hour' ? HOUR : DAY));
    const dims = { model: u.model, apiKeyId: u.apiKeyId, projectId: u.projectId, agentId: u.agentId };
    const id = createHash('sha256')
      .update(JSON.stringify([entry.tenantId, unit, start, ...DIMS.map((d) => dims[d])]))
      .digest('base64url');
    const fresh = (): UsageRollupDoc => ({
      id,
      tenantId: entry.tenantId,
      unit,
      start,
      period: unit === 'hour' ? start.slice(0, 10) : start.slice(0, 7),
      ...dims,
      calls: 0,
      inputTokens: 0,
      outputTokens: 0,
      credits: 0,
    });
    if (tally) tally.count(usageRollups, id, by, fresh);
    else await addToCounter(col, id, by, fresh);
  }
}

export interface UsageQuery {
  from: number;
  to: number;
  granularity: Unit;
  groupBy: Group[];
}

/** The request's parameters, or a 400 naming every bad field. */
export function parseUsageQuery(req: billingV1.GetUsageAnalyticsRequest): UsageQuery {
  const fields: Array<{ field: string; message: string }> = [];
  const time = (field: 'from' | 'to') => {
    const value = req[field];
    // ISO 8601 date or date-time; Date.parse alone would take other formats too.
    const ms = /^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?)?$/.test(value) ? Date.parse(value) : NaN;
    if (Number.isNaN(ms)) fields.push({ field, message: value ? 'must be an ISO 8601 date-time' : 'is required' });
    return ms;
  };
  const from = time('from');
  const to = time('to');
  if (!Number.isNaN(from) && !Number.isNaN(to)) {
    if (to <= from) fields.push({ field: 'to', message: 'must be after from' });
    else if (to - from > MAX_SPAN) fields.push({ field: 'to', message: 'must be at most 366 days after from' });
  }
  const granularity = (req.granularity || 'day') as Unit;
  if (granularity !== 'hour' && granularity !== 'day') fields.push({ field: 'granularity', message: 'must be hour or day' });
  const groupBy: Group[] = [];
  for (const g of req.groupBy) {
    if (!(g in GROUPS)) fields.push({ field: 'groupBy', message: `unknown group ${JSON.stringify(g)}: use model, apiKey, project, agent` });
    else if (!groupBy.includes(g as Group)) groupBy.push(g as Group);
  }
  if (fields.length) throw errors.validation(fields);
  return { from, to, granularity, groupBy };
}

type Totals = Pick<UsageRollupDoc, 'calls' | 'inputTokens' | 'outputTokens' | 'credits'>;
type Part = Pick<UsageRollupDoc, Dim> & Totals & { at: number };

/** Every rollup of `unit` starting in [from, to), looked up by the days (hours) or months (days) they fall in. */
async function* rollupsIn(store: Store, tenantId: string, unit: Unit, from: number, to: number): AsyncGenerator<Part> {
  if (from >= to) return;
  const periods = new Set<string>();
  for (let t = from; t < to; t += unit === 'hour' ? HOUR : DAY) periods.add(iso(t).slice(0, unit === 'hour' ? 10 : 7));
  const col = store.collection(usageRollups);
  for (const period of periods) {
    let cursor: string | null = null;
    do {
      const page = await col.find({ tenantId, unit, period }, { limit: 1000, cursor, order: 'asc' });
      for (const r of page.items) {
        const at = Date.parse(r.start);
        if (at >= from && at < to) yield { ...r, at };
      }
      cursor = page.nextCursor;
    } while (cursor);
  }
}

/** The usage entries of the hour starting at `hour` whose time is in [from, to) (a window's partial end hours). */
async function* entriesIn(store: Store, tenantId: string, hour: number, from: number, to: number): AsyncGenerator<Part> {
  if (from >= to) return;
  let cursor: string | null = null;
  do {
    const page = await store.collection(ledger).find({ tenantId, hour: iso(hour) }, { limit: 1000, cursor, order: 'asc' });
    for (const e of page.items) {
      const at = Date.parse(e.createdAt);
      if (e.kind !== 'usage' || !e.usage || at < from || at >= to) continue;
      const { inputTokens, outputTokens, ...dims } = e.usage;
      yield { ...dims, calls: 1, inputTokens, outputTokens, credits: -e.credits, at };
    }
    cursor = page.nextCursor;
  } while (cursor);
}

/** The parts that make up [from, to): whole days (when bucketing by day), whole hours, and partial end hours. */
function partsOf(store: Store, tenantId: string, q: UsageQuery): Array<AsyncGenerator<Part>> {
  const h0 = ceilTo(q.from, HOUR);
  const h1 = floorTo(q.to, HOUR);
  if (h0 > h1) return [entriesIn(store, tenantId, floorTo(q.from, HOUR), q.from, q.to)];
  const parts = [entriesIn(store, tenantId, floorTo(q.from, HOUR), q.from, h0), entriesIn(store, tenantId, h1, h1, q.to)];
  const d0 = ceilTo(h0, DAY);
  const d1 = floorTo(h1, DAY);
  if (q.granularity === 'hour' || d0 >= d1) return [...parts, rollupsIn(store, tenantId, 'hour', h0, h1)];
  return [
    ...parts,
    rollupsIn(store, tenantId, 'hour', h0, d0),
    rollupsIn(store, tenantId, 'day', d0, d1),
    rollupsIn(store, tenantId, 'hour', d1, h1),
  ];
}

type UsageRow = billingV1.UsageRow;

/** The window's rows, oldest bucket first; 400 when there would be more than MAX_ROWS. */
export async function usageRows(store: Store, tenantId: string, q: UsageQuery): Promise<UsageRow[]> {
  const unit = q.granularity === 'hour' ? HOUR : DAY;
  const dims = q.groupBy.map((g) => GROUPS[g]);
  const rows = new Map<string, UsageRow>();
  for (const part of partsOf(store, tenantId, q)) {
    for await (const p of part) {
      const start = iso(floorTo(p.at, unit));
      const key = JSON.stringify([start, ...dims.map((d) => p[d])]);
      let row = rows.get(key);
      if (!row) {
        if (rows.size >= MAX_ROWS)
          throw errors.badRequest(
            'too_many_rows',
            `More than ${MAX_ROWS} rows: narrow the window, use day buckets or group by fewer fields`,
            { maxRows: MAX_ROWS },
          );
        row = { start, model: '', apiKeyId: '', projectId: '', agentId: '', calls: 0, inputTokens: 0, outputTokens: 0, credits: 0 };
        for (const d of dims) row[d] = p[d];
        rows.set(key, row);
      }
      row.calls += p.calls;
      row.inputTokens += p.inputTokens;
      row.outputTokens += p.outputTokens;
      row.credits += p.credits;
    }
  }
  const order = (r: UsageRow) => [r.start, ...DIMS.map((d) => r[d])];
  return [...rows.values()].sort((a, b) => {
    const x = order(a);
    const y = order(b);
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
  });
}

export function usageAnalyticsHandlers(store: Store) {
  return {
    /** Any member of the tenant; a scoped key needs billing:read. */
    async getUsageAnalytics(req: billingV1.GetUsageAnalyticsRequest, ctx: CallContext): Promise<billingV1.GetUsageAnalyticsResponse> {
      const { auth } = authed(ctx, 'billing:read');
      return { rows: await usageRows(store, auth.tid, parseUsageQuery(req)) };
    },
  };
}
