/**
 * The bus consumer: every public event of every publishing service joins the event log (GET /events, recovery) and
 * becomes one delivery per active registration of its tenant subscribed to its type. Idempotent by event id and by
 * (webhookId, eventId): the bus delivers at least once, and a message seen again (a crash before the offset moved)
 * finds its log entry and deliveries already there.
 */
import { newId, nowIso, type ReceivedMessage, type Store, type StoreSession } from '@svc/kit';
import { decodeDomainEvent, PUBLIC_EVENT_TYPES } from '@svc/contracts';
import { deliveries, queue, webhooks, type DeliveryDoc, type EventDoc, type WebhookDoc } from './collections';
import type { EventLog } from './event-log';
import { eventBody } from './payload';
import { nextDueUs } from './worker';

const PUBLIC = new Set<string>(PUBLIC_EVENT_TYPES);
/** Registrations read at a time; a tenant may have many pages of them (WEBHOOKS_PER_TENANT), all are read. */
const PAGE = 500;

/** Writes a pending delivery and its queue entry (in the caller's transaction). */
export async function enqueue(
  tx: StoreSession,
  fields: Pick<DeliveryDoc, 'tenantId' | 'webhookId' | 'eventId' | 'eventType' | 'body' | 'manual'>,
): Promise<DeliveryDoc> {
  const now = nowIso();
  const doc: DeliveryDoc = {
    id: newId('dlv'),
    ...fields,
    status: 'pending',
    attempts: [],
    scheduled: 0,
    firstAttemptAt: null,
    nextAttemptAt: now,
    createdAt: now,
    updatedAt: now,
  };
  await tx.collection(deliveries).insert(doc);
  await tx.collection(queue).insert({ id: doc.id, webhookId: doc.webhookId, dueUs: nextDueUs(), claimed: false, createdAt: now });
  return doc;
}

/** Queues one more attempt of an existing delivery (a re-send, a recovery). */
export async function enqueueExisting(tx: StoreSession, id: string, webhookId: string, now: string): Promise<void> {
  await tx.collection(queue).insert({ id, webhookId, dueUs: nextDueUs(), claimed: false, createdAt: now });
}

/** A public event of a tenant, as the log keeps it and its deliveries send it; null for one that is not. */
function publicEvent(message: ReceivedMessage): EventDoc | null {
  // The type travels in a header: internal events (usage, plan changes) are skipped without decoding.
  const headerType = message.headers['event-type'];
  if (headerType !== undefined && !PUBLIC.has(headerType)) return null;
  const event = decodeDomainEvent(message.value);
  if (!PUBLIC.has(event.type) || !event.tenantId) return null;
  return { id: event.id, tenantId: event.tenantId, type: event.type, createdAt: event.createdAt, body: eventBody(event) };
}

/**
 * A page of the registrations that take `event`: active, of its tenant, subscribed to its type, and older than it. A
 * registration gets the events created after it (CONTRACT 10), also when the bus brings an older one late (a consumer
 * catching up after an outage): the range on its createdAt says so. Times of two services' clocks: exact to their
 * skew, no more.
 */
async function targetsOf(store: Store, event: EventDoc, cursor: string | null) {
  const page = await store
    .collection(webhooks)
    .find({ tenantId: event.tenantId, active: true }, { limit: PAGE, cursor, range: { lte: event.createdAt } });
  return { targets: page.items.filter((h) => h.events.includes(event.type)), cursor: page.nextCursor };
}

/** The deliveries of `event` to `targets` that are not there yet (in the caller's transaction); their webhook ids. */
async function enqueueAll(tx: StoreSession, event: EventDoc, targets: WebhookDoc[]): Promise<string[]> {
  const ids: string[] = [];
  for (const hook of targets) {
    if (await tx.collection(deliveries).findOne({ webhookId: hook.id, eventId: event.id })) continue;
    await enqueue(tx, {
      tenantId: event.tenantId,
      webhookId: hook.id,
      eventId: event.id,
      eventType: event.type,
      body: event.body,
      manual: false,
    });
    ids.push(hook.id);
  }
  return ids;
}

/** Deliveries one batch's transaction writes at most; an event that would pass it is handled alone. */
const BATCH_DELIVERIES = 500;

/** The bus consumer's handlers: one message, or a batch of them in one transaction (`SubscribeOptions.handleBatch`). */
export function fanOut(store: Store, log: EventLog, onQueued: (webhookId: string) => void) {
  /** One event alone. */
  const handleEvent = async (event: EventDoc): Promise<void> => {
    // A transaction per page: a crash between two leaves the message unacknowledged, and the bus's redelivery finds
    // the first page's deliveries already there. The event joins the log in the first transaction that writes.
    let recorded = false;
    let cursor: string | null = null;
    await log.prepare(event.tenantId);
    do {
      const page = await targetsOf(store, event, cursor);
      cursor = page.cursor;
      if (page.targets.length === 0 && (recorded || cursor)) continue;
      if (page.targets.length === 0) {
        // Nothing to deliver: the log entry alone (one seen before is the bus delivering it again).
        await log.recordAlone(event);
        recorded = true;
        continue;
      }
      const first = !recorded;
      const created = await store.transaction(async (tx) => {
        if (first) await log.record(tx, event);
        return enqueueAll(tx, event, page.targets);
      });
      if (first) log.announce(event.tenantId);
      recorded = true;
      for (const id of created) onQueued(id);
    } while (cursor);
  };

  const handler = async (message: ReceivedMessage): Promise<void> => {
    const event = publicEvent(message);
    if (event) await handleEvent(event);
  };

  /**
   * A batch in order: the log entries and deliveries of its events in one transaction, instead of one (or more) each.
   * An event with more than a page of registrations, or one that would make the transaction too large, goes alone,
   * after what came before it is written: each registration still gets its deliveries in order.
   */
  const handleBatch = async (messages: ReceivedMessage[]): Promise<void> => {
    let pending: Array<{ event: EventDoc; targets: WebhookDoc[] }> = [];
    let queued = 0;
    const flush = async () => {
      if (pending.length === 0) return;
      const items = pending;
      pending = [];
      queued = 0;
      const created = await store.transaction(async (tx) => {
        const ids: string[] = [];
        for (const { event, targets } of items) {
          await log.record(tx, event);
          ids.push(...(await enqueueAll(tx, event, targets)));
        }
        return ids;
      });
      for (const tenantId of new Set(items.map((i) => i.event.tenantId))) log.announce(tenantId);
      for (const id of created) onQueued(id);
    };
    for (const message of messages) {
      const event = publicEvent(message);
      if (!event) continue;
      await log.prepare(event.tenantId);
      const page = await targetsOf(store, event, null);
      if (page.cursor || queued + page.targets.length > BATCH_DELIVERIES) {
        await flush();
        await handleEvent(event);
        continue;
      }
      pending.push({ event, targets: page.targets });
      queued += page.targets.length;
    }
    await flush();
  };

  return { handler, handleBatch };
}
