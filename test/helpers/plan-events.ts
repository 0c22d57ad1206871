import { domainEvent, TOPICS } from '@svc/contracts';
import type { BusMessage } from '@svc/kit';
import { stackBus, type Stack } from './stack';

/**
 * A `tenant.plan_changed` event as billing publishes it (events.v1 PlanData on billing's topic, keyed by tenant),
 * written to the stack's real bus. Returns the message so a test can deliver it again.
 */
export function planChanged(tenantId: string, plan: string, previousPlan = 'free'): BusMessage {
  return domainEvent(TOPICS.billing, 'tenant.plan_changed', tenantId, {
    $case: 'plan',
    // No version: ordered by its time, as the events of a billing that did not number its changes.
    value: { tenantId, plan, previousPlan, changedAt: new Date().toISOString(), version: 0 },
  });
}

export async function publish(stack: Stack, ...messages: BusMessage[]): Promise<void> {
  const bus = stackBus(stack, 'test-plan-events');
  try {
    await bus.publish(messages);
  } finally {
    await bus.close();
  }
}
