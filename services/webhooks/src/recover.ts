/**
 * Recovery (POST /webhooks/:id/recover, CONTRACT.md 10): every event of the registration's types in the window that
 * did not reach it is delivered once more, with its original id and body, under the usual retry schedule. An event
 * with no delivery (sent while the registration was disabled) gets one; a failed delivery is pending again with its
 * schedule from the start; one pending or succeeded is left alone, so nothing is sent twice. A disabled registration
 * is enabled in the first transaction, before anything it is to receive is queued (a disabled registration's queue
 * entries fail unsent), and `webhook.endpoint_recovered` is recorded with it.
 *
 * Order: the log is read oldest first and queued a page per transaction, each entry due after the one before, so the
 * registration's drain sends the recovered events in the order they happened. Events fanned out while a recovery
 * runs (the registration is active again) are new ones and may be sent among them.
 */
import { DuplicateKeyError, nowIso, type Store, type StoreSession } from '@svc/kit';
import { deliveries, webhooks, type EventDoc, type WebhookDoc } from './collections';
import { emitEndpointEvent } from './endpoint-events';
import { tighter, type EventLog, type Window } from './event-log';
import { enqueue, enqueueExisting } from './fanout';

/** A page whose transaction met a delivery the fan-out made meanwhile is read again this often at most. */
const PAGE_ATTEMPTS = 5;

export interface RecoverDeps {
  store: Store;
  log: EventLog;
  /** New work was queued for the registration. */
  onQueued: (webhookId: string) => void;
  /** The outbox holds a new event (the registration was enabled again). */
  onOutbox: () => void;
}

/** Queues what `hook` missed in `window`; returns how many deliveries were queued. */
export async function recover(deps: RecoverDeps, hook: WebhookDoc, window: Window): Promise<number> {
  const { store, log } = deps;
  let queued = 0;
  let enabled = hook.active;
  // As in the fan-out, a registration never gets events from before it existed.
  const since = tighter(window, { lower: { op: 'gte', iso: hook.createdAt } });
  await log.forEachPage(hook.tenantId, hook.events, since, async (missed) => {
    if (missed.length === 0 && enabled) return;
    for (let attempt = 1; ; attempt++) {
      try {
        let announced = false;
        queued += await store.transaction(async (tx) => {
          if (!enabled) announced = await enable(tx, hook);
          return queueMissed(tx, hook, missed);
        });
        enabled = true;
        if (announced) deps.onOutbox();
        break;
      } catch (err) {
        // The fan-out created one of these deliveries between our read and our insert: the page is read again.
        if (!(err instanceof DuplicateKeyError) || attempt === PAGE_ATTEMPTS) throw err;
      }
    }
    deps.onQueued(hook.id);
  });
  return queued;
}

/** Enables the registration if it is still disabled; true when this transaction did (and announced it). */
async function enable(tx: StoreSession, hook: WebhookDoc): Promise<boolean> {
  const patch = { active: true, disabledReason: null, failingSince: null, updatedAt: nowIso() };
  const updated = await tx.collection(webhooks).update(hook.id, { tenantId: hook.tenantId, active: false }, patch);
  if (updated) await emitEndpointEvent(tx, 'webhook.endpoint_recovered', updated);
  return updated !== null;
}

/** Queues each event that has no delivery to `hook`, or a failed one; returns how many. */
async function queueMissed(tx: StoreSession, hook: WebhookDoc, missed: EventDoc[]): Promise<number> {
  const col = tx.collection(deliveries);
  let n = 0;
  for (const e of missed) {
    const d = await col.findOne({ webhookId: hook.id, eventId: e.id });
    if (!d) {
      await enqueue(tx, { tenantId: hook.tenantId, webhookId: hook.id, eventId: e.id, eventType: e.type, body: e.body, manual: false });
      n++;
      continue;
    }
    if (d.status !== 'failed') continue; // delivered, or on its way
    const now = nowIso();
    // Its schedule starts again, and its attempts count towards the disable rule again (not a manual send).
    const again = await col.update(
      d.id,
      { status: 'failed' },
      { status: 'pending', manual: false, scheduled: 0, firstAttemptAt: null, nextAttemptAt: now, updatedAt: now },
    );
    if (!again) continue;
    await enqueueExisting(tx, again.id, hook.id, now);
    n++;
  }
  return n;
}
