/**
 * The tenant's plan, kept from events: `tenant.created` (identity; TenantData.plan) and `tenant.plan_changed`
 * (billing; PlanData). Applied once per event id (the bus delivers at least once) in the same transaction as the
 * change. The two come on different topics, so their order is not known: `tenant.created` only fills in a plan
 * that is missing and never overwrites one set by a plan change. A plan change applies only when it is newer than
 * the one held (contracts `planChangeIsNewer`: billing's per-tenant version), not because it came last: a dead letter
 * replayed, or an older copy republished after a relay take-over, arrives after later changes. A tenant not heard
 * of yet is on `free`.
 */
import { nowIso, type Logger, type ReceivedMessage, type Store } from '@svc/kit';
import { decodeDomainEvent, planChangeIsNewer } from '@svc/contracts';
import { isPlan, type Plan } from '@svc/plans';
import { appliedEvents, tenantPlans } from './collections';

const TYPES = new Set(['tenant.created', 'tenant.plan_changed']);

export async function planOf(store: Store, tenantId: string): Promise<Plan> {
  return (await store.collection(tenantPlans).get(tenantId))?.plan ?? 'free';
}

export function planEventHandler(store: Store, logger: Logger) {
  return async (message: ReceivedMessage): Promise<void> => {
    const headerType = message.headers['event-type'];
    if (headerType !== undefined && !TYPES.has(headerType)) return; // skipped without decoding
    const event = decodeDomainEvent(message.value);
    let plan: string;
    /** Set for a plan change: its order (a tenant.created only fills in a missing plan). */
    let change: { version: number; changedAt: string } | null;
    if (event.type === 'tenant.created' && event.data?.$case === 'tenant') {
      plan = event.data.value.plan || 'free';
      change = null;
    } else if (event.type === 'tenant.plan_changed' && event.data?.$case === 'plan') {
      plan = event.data.value.plan;
      change = { version: event.data.value.version, changedAt: event.data.value.changedAt };
    } else return;
    if (!event.tenantId || !isPlan(plan)) {
      // Retrying would not make it valid: log and move on rather than block the tenant's later events.
      logger.warn({ eventId: event.id, type: event.type, plan }, 'plan event ignored: no tenant or unknown plan');
      return;
    }
    // A concurrent apply of the same event by another replica fails on the unique id: the bus retries, and the
    // retry finds the event applied.
    await store.transaction(async (tx) => {
      const applied = tx.collection(appliedEvents);
      if (await applied.get(event.id)) return;
      const now = nowIso();
      await applied.insert({ id: event.id, type: event.type, createdAt: now });
      const plans = tx.collection(tenantPlans);
      const current = await plans.get(event.tenantId);
      const order = change ? { ...(change.version > 0 ? { version: change.version } : {}), changedAt: change.changedAt } : {};
      if (!current) await plans.insert({ id: event.tenantId, plan, eventId: event.id, ...order, createdAt: now, updatedAt: now });
      else if (change && planChangeIsNewer(current, change))
        // An event without a version keeps the version held: the next numbered change still orders after it.
        await plans.update(event.tenantId, {}, { plan, eventId: event.id, ...order, updatedAt: now });
    });
  };
}
