import { addToOutbox, type StoreSession } from '@svc/kit';
import { domainEvent, TOPICS } from '@svc/contracts';
import type { WebhookDoc } from './collections';

/**
 * The operational events of a registration (public types, CONTRACT.md 10): `webhook.endpoint_disabled` when the
 * disable rule fires, `webhook.endpoint_recovered` when a disabled registration is enabled again (PATCH active, or a
 * recovery). This service publishes them like any other and its own consumer delivers them to the tenant's other
 * registrations that subscribe.
 */
export type EndpointEventType = 'webhook.endpoint_disabled' | 'webhook.endpoint_recovered';

/** Records the event in the transaction of the change (the outbox relays it once that commits). */
export async function emitEndpointEvent(tx: StoreSession, type: EndpointEventType, hook: WebhookDoc): Promise<void> {
  const value = {
    id: hook.id,
    url: hook.url,
    events: hook.events,
    active: hook.active,
    disabledReason: hook.disabledReason ?? undefined,
    createdAt: hook.createdAt,
    updatedAt: hook.updatedAt,
  };
  await addToOutbox(tx, domainEvent(TOPICS.webhooks, type, hook.tenantId, { $case: 'webhookEndpoint', value }));
}
