/**
 * The bus consumer: every public event of every publishing service joins the event log (GET /events, recovery) and
 * becomes one delivery per active registration of its tenant subscribed to its type. Idempotent by event id and by
 * (webhookId, eventId): the bus delivers at least once, and a message seen again (a crash before the offset moved)
 * finds its log entry and deliveries already there.
 */
import { newId, nowIso, type ReceivedMessage, type Store, type StoreSession } from '@svc/kit';
import { decodeDomainEvent, PUBLIC_EVENT_TYPES } from '@svc/contracts';
import { deliveries, queue, webhooks, type DeliveryDoc, type EventDoc } from './collections';
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

export function fanOut(store: Store, log: EventLog, onQueued: (webhookId: string) => void) {
  return async (message: ReceivedMessage): Promise<void> => {
    // The type travels in a header: internal events (usage, plan changes) are skipped without decoding.
    const headerType = message.headers['event-type'];
    if (headerType !== undefined && !PUBLIC.has(headerType)) return;
    const event = decodeDomainEvent(message.value);
    if (!PUBLIC.has(event.type) || !event.tenantId) return;
    const body = eventBody(event);
    const doc: EventDoc = { id: event.id, tenantId: event.tenantId, type: event.type, createdAt: event.createdAt, body };
    // A transaction per page: a crash between two leaves the message unacknowledged, and the bus's redelivery finds
    // the first page's deliveries already there. The event joins the log in the first transaction that writes.
    let recorded = false;
    let cursor: string | null = null;
    do {
      // A registration gets the events created after it (CONTRACT 10), also when the bus brings an older one late
      // (a consumer catching up after an outage): the range on its createdAt says so. Times of two services' clocks:
      // exact to their skew, no more.
      const page = await store
        .collection(webhooks)
        .find({ tenantId: event.tenantId, active: true }, { limit: PAGE, cursor, range: { lte: event.createdAt } });
      cursor = page.nextCursor;
      const targets = page.items.filter((h) => h.events.includes(event.type));
      if (targets.length === 0 && (recorded || cursor)) continue;
      if (targets.length === 0) {
        // Nothing to deliver: the log entry alone, one statement (a duplicate is the bus delivering it again).
        await log.recordAlone(doc);
        recorded = true;
        continue;
      }
      const created = await store.transaction(async (tx) => {
        if (!recorded) await log.record(tx, doc);
        const ids: string[] = [];
        for (const hook of targets) {
          if (await tx.collection(deliveries).findOne({ webhookId: hook.id, eventId: event.id })) continue;
          await enqueue(tx, {
            tenantId: event.tenantId,
            webhookId: hook.id,
            eventId: event.id,
            eventType: event.type,
            body,
            manual: false,
          });
          ids.push(hook.id);
        }
        return ids;
      });
      recorded = true;
      for (const id of created) onQueued(id);
    } while (cursor);
  };
}
