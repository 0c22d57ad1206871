import type { webhooksV1 } from '@svc/proto';
import type { DeliveryDoc, EventDoc, WebhookDoc } from './collections';

export function toWebhook(w: WebhookDoc): webhooksV1.Webhook {
  return {
    id: w.id,
    url: w.url,
    events: w.events,
    active: w.active,
    disabledReason: w.disabledReason ?? '',
    createdAt: w.createdAt,
    updatedAt: w.updatedAt,
  };
}

export function toDelivery(d: DeliveryDoc): webhooksV1.Delivery {
  return {
    id: d.id,
    webhookId: d.webhookId,
    eventId: d.eventId,
    eventType: d.eventType,
    status: d.status,
    attempts: d.attempts,
    nextAttemptAt: d.nextAttemptAt ?? '',
    createdAt: d.createdAt,
    updatedAt: d.updatedAt,
  };
}

export function toStoredEvent(e: EventDoc): webhooksV1.StoredEvent {
  return { id: e.id, type: e.type, createdAt: e.createdAt, bodyJson: e.body };
}
