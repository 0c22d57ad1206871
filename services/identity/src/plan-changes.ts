/**
 * The tenant's plan is set by billing (subscriptions, the operator API), which publishes `tenant.plan_changed` on its
 * topic; identity keeps the copy that `GET /tenant` and tokens show. A change applies only when it is newer than the
 * one applied last (contracts `planChangeIsNewer`: billing's per-tenant version of the change, or for an event without
 * one billing's time of it), so a redelivered or replayed older event changes nothing, whatever billing's clocks say.
 * Each change applied is also recorded in the revocation feed as `tenant_changed` (it revokes nothing), in the same
 * transaction, and announced: gateways drop their cached copy of the tenant when they read it.
 */
import { nowIso, type Logger, type ReceivedMessage, type Store } from '@svc/kit';
import { decodeDomainEvent, planChangeIsNewer } from '@svc/contracts';
import { tenants, type Plan } from './collections';
import { recordRevocation } from './revocations';

const PLANS: readonly string[] = ['free', 'starter', 'growth', 'enterprise'] satisfies Plan[];

export function planChangeHandler(store: Store, logger: Logger, announce: () => void) {
  return async (message: ReceivedMessage): Promise<void> => {
    const headerType = message.headers['event-type'];
    if (headerType !== undefined && headerType !== 'tenant.plan_changed') return;
    const event = decodeDomainEvent(message.value);
    if (event.type !== 'tenant.plan_changed' || event.data?.$case !== 'plan') return;
    const { plan, changedAt, version } = event.data.value;
    if (!PLANS.includes(plan)) {
      logger.warn({ eventId: event.id, plan }, 'plan change ignored: unknown plan');
      return;
    }
    for (let i = 0; i < 5; i++) {
      const outcome = await store.transaction(async (tx) => {
        const col = tx.collection(tenants);
        const tenant = await col.get(event.tenantId);
        const held = { version: tenant?.planVersion, changedAt: tenant?.planChangedAt };
        if (!tenant || !planChangeIsNewer(held, { version, changedAt })) return 'stale';
        // Compare-and-set on the last applied change: of two replicas applying events at once, the newer one stays.
        const done = await col.update(
          tenant.id,
          { planChangedAt: tenant.planChangedAt ?? null, planVersion: tenant.planVersion ?? null },
          {
            plan: plan as Plan,
            planChangedAt: changedAt,
            // An event without a version keeps the version held: the next numbered change still orders after it.
            ...(version > 0 ? { planVersion: version } : {}),
            updatedAt: nowIso(),
          },
        );
        if (!done) return 'raced';
        await recordRevocation(tx, 'tenant_changed', tenant.id);
        return 'applied';
      });
      if (outcome === 'applied') announce();
      if (outcome !== 'raced') return;
    }
  };
}
