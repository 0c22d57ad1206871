/**
 * The event log (CONTRACT.md 10): every public event the fan-out consumer reads is kept here with the exact body its
 * deliveries send, for `GET /events` and for recovery. An event older than the retention is out of every read at once
 * (reads bound `createdAt` by the cut-off) and deleted by an hourly sweep, oldest first.
 *
 * Beside its `createdAt` (the producer's clock, and the bus may bring an event late), each event gets its place in
 * the tenant's commit order (`event_order`), which the live stream follows: see `after`.
 */
import {
  advanceHead,
  encodeCursor,
  ensureHead,
  Retention,
  type Logger,
  type Page,
  pages,
  type SortRange,
  type Store,
  type StoreSession,
} from '@svc/kit';
import { deliveries, eventOrder, events, type EventDoc, type WebhookDoc } from './collections';

/** How often the sweep runs; each run deletes in batches until nothing is past the retention. */
/** Events read per store page while looking for undelivered ones. */
const SCAN_PAGE = 100;
/**
 * Events one page of `deliveryFailed` looks at, at most: an endpoint that received nearly everything could otherwise
 * make one page read the whole log. A page that stops there carries a cursor and may hold fewer items than asked.
 */
export const SCAN_MAX = 1000;

/** A lower and an upper bound on `createdAt`, as the store takes them (`FindOptions.range`). */
export interface Window {
  lower?: { op: 'gt' | 'gte'; iso: string };
  upper?: { op: 'lt' | 'lte'; iso: string };
}

export interface ListQuery {
  tenantId: string;
  /** One type, or every type. */
  type?: string;
  window: Window;
  limit: number;
  cursor: string | null;
}

export class EventLog {
  private readonly retention: Retention<EventDoc>;
  /** Tenants whose head document is known to exist (see ensureHead); bounded by clearing. */
  private readonly heads = new Set<string>();
  private readonly appended = new Set<(tenantId: string) => void>();

  constructor(
    private readonly store: Store,
    o: { retentionDays: number; logger: Logger; now?: () => number },
  ) {
    this.retention = new Retention(store, events, {
      ...o,
      label: 'event log',
      alsoDelete: async (tx, doc) => void (await tx.collection(eventOrder).delete(doc.id)),
    });
  }

  /** The oldest `createdAt` still kept (exclusive). */
  cutoff(): string {
    return this.retention.cutoff();
  }

  /**
   * Before a transaction that records events of the tenant: its head document exists, so two first events written at
   * once do not both insert it (a duplicate key dooms a transaction).
   */
  async prepare(tenantId: string): Promise<void> {
    if (this.heads.has(tenantId)) return;
    await ensureHead(this.store, headOf(tenantId));
    if (this.heads.size > 100_000) this.heads.clear();
    this.heads.add(tenantId);
  }

  /**
   * Keeps an event (in the caller's transaction) and gives it the next place in its tenant's commit order; one seen
   * before (the bus delivers at least once) is left as it is. Call `prepare` first and `announce` after the commit.
   */
  async record(tx: StoreSession, doc: EventDoc): Promise<void> {
    const col = tx.collection(events);
    if (await col.get(doc.id)) return;
    await col.insert(doc);
    const seq = await advanceHead(tx, headOf(doc.tenantId));
    await tx.collection(eventOrder).insert({ id: doc.id, tenantId: doc.tenantId, seq });
  }

  /** Keeps an event in a transaction of its own; one seen before is left as it is. */
  async recordAlone(doc: EventDoc): Promise<void> {
    await this.prepare(doc.tenantId);
    await this.store.transaction((tx) => this.record(tx, doc));
    this.announce(doc.tenantId);
  }

  /** After a commit that recorded events of the tenant: its live streams on this replica read now. */
  announce(tenantId: string): void {
    for (const listener of this.appended) listener(tenantId);
  }

  /** Calls `listener` after each commit of this process that recorded events; returns the function that stops it. */
  onAppended(listener: (tenantId: string) => void): () => void {
    this.appended.add(listener);
    return () => this.appended.delete(listener);
  }

  /**
   * The tenant's events after place `seq` of its commit order, oldest first, at most `limit`, and the last place read.
   * Only what a majority holds (a place a failover could roll back would be handed out again). An event past the
   * retention is skipped.
   */
  async after(tenantId: string, seq: number, limit: number): Promise<{ events: EventDoc[]; lastSeq: number }> {
    const page = await this.store.collection(eventOrder).find({ tenantId }, { order: 'asc', limit, range: { gt: seq }, durable: true });
    const found = await Promise.all(page.items.map((o) => this.get(tenantId, o.id)));
    return {
      events: found.filter((e) => e !== null),
      lastSeq: page.items.length ? page.items[page.items.length - 1].seq : seq,
    };
  }

  /** The place of the tenant's event in its commit order; null for an unknown one (or another tenant's). */
  async placeOf(tenantId: string, eventId: string): Promise<number | null> {
    const doc = eventId ? await this.store.collection(eventOrder).get(eventId, { tenantId }) : null;
    return doc?.seq ?? null;
  }

  /** The place of the tenant's newest committed event (0 for none): where a stream that starts now begins. */
  async newestPlace(tenantId: string): Promise<number> {
    const page = await this.store.collection(eventOrder).find({ tenantId }, { order: 'desc', limit: 1, durable: true });
    return page.items[0]?.seq ?? 0;
  }

  /** The tenant's event, unless it is past the retention; another tenant's is null, like a missing one. */
  async get(tenantId: string, id: string): Promise<EventDoc | null> {
    const doc = id ? await this.store.collection(events).get(id, { tenantId }) : null;
    return doc && doc.createdAt > this.cutoff() ? doc : null;
  }

  /** A page of the tenant's events, newest first. */
  list(q: ListQuery): Promise<Page<EventDoc>> {
    const where = q.type ? { tenantId: q.tenantId, type: q.type } : { tenantId: q.tenantId };
    return this.store.collection(events).find(where, { limit: q.limit, cursor: q.cursor, range: this.range(q.window) });
  }

  /**
   * A page of the events of `hook`'s types, created at or after it, that did not reach it: their delivery failed or
   * is still pending, or there is none (sent while the registration was disabled). Reads at most SCAN_MAX events.
   */
  async undelivered(hook: WebhookDoc, q: ListQuery): Promise<Page<EventDoc>> {
    const types = q.type ? hook.events.filter((t) => t === q.type) : hook.events;
    if (types.length === 0) return { items: [], nextCursor: null };
    const where = types.length === 1 ? { tenantId: q.tenantId, type: types[0] } : { tenantId: q.tenantId };
    const range = this.range(tighter(q.window, { lower: { op: 'gte', iso: hook.createdAt } }));
    const items: EventDoc[] = [];
    let cursor = q.cursor;
    let last: EventDoc | null = null;
    for (let scanned = 0; scanned < SCAN_MAX;) {
      const page = await this.store.collection(events).find(where, { limit: SCAN_PAGE, cursor, range });
      for (const doc of page.items) {
        scanned++;
        last = doc;
        if (!types.includes(doc.type)) continue;
        const delivery = await this.store.collection(deliveries).findOne({ webhookId: hook.id, eventId: doc.id });
        if (delivery?.status === 'succeeded') continue;
        items.push(doc);
        if (items.length === q.limit) return { items, nextCursor: encodeCursor(doc.createdAt, doc.id) };
      }
      if (!page.nextCursor) return { items, nextCursor: null };
      cursor = page.nextCursor;
    }
    return { items, nextCursor: last ? encodeCursor(last.createdAt, last.id) : null };
  }

  /**
   * Every event of the tenant of one of `types` in the window, oldest first, a page at a time: `visit` runs once per
   * page, even an empty one (recovery queues each page in one transaction).
   */
  async forEachPage(tenantId: string, types: string[], window: Window, visit: (page: EventDoc[]) => Promise<void>): Promise<void> {
    const where = types.length === 1 ? { tenantId, type: types[0] } : { tenantId };
    const range = this.range(window);
    for await (const page of pages(this.store.collection(events), where, { order: 'asc', limit: 200, range }))
      await visit(page.filter((e) => types.includes(e.type)));
  }

  /** The store range of a window, never reaching past the retention. */
  private range(window: Window): SortRange {
    const w = tighter(window, { lower: { op: 'gt', iso: this.cutoff() } });
    return { ...(w.lower ? { [w.lower.op]: w.lower.iso } : {}), ...(w.upper ? { [w.upper.op]: w.upper.iso } : {}) };
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

/** The head document of a tenant's commit order (kit feed heads). */
const headOf = (tenantId: string) => `events/${tenantId}`;

/** The later of two lower bounds and the earlier of two upper ones (exclusive wins a tie). */
export function tighter(a: Window, b: Window): Window {
  const lower = [a.lower, b.lower].filter((x) => x !== undefined);
  const upper = [a.upper, b.upper].filter((x) => x !== undefined);
  lower.sort((x, y) => (x.iso !== y.iso ? (x.iso < y.iso ? 1 : -1) : x.op === 'gt' ? -1 : 1));
  upper.sort((x, y) => (x.iso !== y.iso ? (x.iso < y.iso ? -1 : 1) : x.op === 'lt' ? -1 : 1));
  return { ...(lower[0] ? { lower: lower[0] } : {}), ...(upper[0] ? { upper: upper[0] } : {}) };
}
