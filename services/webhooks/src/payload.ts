import type { eventsV1 } from '@svc/proto';
import { signedHeaders } from '@svc/contracts/webhook-signature';
import { keysAt, type SigningKeys } from './secrets';

/**
 * The JSON form of `events.v1.Event` that receivers get: `{id, type, createdAt, tenantId, data}`, with `data` in
 * the shape of the API's own resources (a project as GET /projects/:id shows it, a user as /auth/me does). Each public
 * type's `data` is the message its `public_event` option sits on (proto/events/v1/events.proto), which is also where
 * its JSON Schema in GET /event-types comes from: the bus message is mapped to it here.
 */
export function eventBody(event: eventsV1.Event): string {
  return JSON.stringify({ id: event.id, type: event.type, createdAt: event.createdAt, tenantId: event.tenantId, data: dataOf(event.data) });
}

/** A message as JSON `data`: its `optional` fields may be null (the API's "none") or left out, as its schema says. */
type Json<T> = { [K in keyof T]: undefined extends T[K] ? JsonValue<Exclude<T[K], undefined>> | null | undefined : JsonValue<T[K]> };
type JsonValue<V> = V extends readonly unknown[] ? V : V extends object ? Json<V> : V;

const orNull = (value: string) => value || null;

function dataOf(data: eventsV1.Event['data']): object {
  switch (data?.$case) {
    case 'project': {
      const p = data.value;
      return {
        id: p.id,
        name: p.name,
        description: p.description,
        language: p.language,
        created_at: p.createdAt,
        updated_at: p.updatedAt,
      } satisfies Json<eventsV1.ProjectPayload>;
    }
    case 'tenant': {
      const t = data.value;
      return { id: t.id, name: t.name, plan: t.plan, createdAt: t.createdAt } satisfies Json<eventsV1.TenantData>;
    }
    case 'user': {
      const u = data.value;
      return { id: u.id, email: u.email, name: u.name, role: u.role, createdAt: u.createdAt } satisfies Json<eventsV1.UserData>;
    }
    case 'deleted':
      return { id: data.value.id } satisfies Json<eventsV1.DeletedData>;
    case 'test':
      return { webhookId: data.value.webhookId, message: data.value.message } satisfies Json<eventsV1.TestData>;
    case 'agentRun': {
      const r = data.value;
      return {
        id: r.runId,
        agentId: r.agentId,
        projectId: r.projectId,
        status: r.status,
        output: orNull(r.output),
        error: orNull(r.error),
        usage: { inputTokens: r.inputTokens, outputTokens: r.outputTokens },
        startedAt: orNull(r.startedAt),
        completedAt: orNull(r.completedAt),
      } satisfies Json<eventsV1.AgentRunPayload>;
    }
    case 'thresholdCrossed': {
      const t = data.value;
      return {
        kind: t.kind,
        threshold: t.threshold,
        value: t.value,
        ...(t.apiKeyId ? { apiKeyId: t.apiKeyId } : {}),
      } satisfies Json<eventsV1.ThresholdCrossedPayload>;
    }
    case 'webhookEndpoint': {
      const w = data.value;
      return {
        id: w.id,
        url: w.url,
        events: w.events,
        active: w.active,
        disabledReason: w.disabledReason || null,
        createdAt: w.createdAt,
        updatedAt: w.updatedAt,
      } satisfies Json<eventsV1.WebhookEndpointData>;
    }
    case 'auditEntry':
      return data.value satisfies Json<eventsV1.AuditEntryData>;
    default:
      return {};
  }
}

export const USER_AGENT = 'svc-webhooks/1.0';

/** The headers of one attempt; `webhook-id` is the event id, the same on every retry. */
export function deliveryHeaders(keys: SigningKeys, eventId: string, body: string, now = Date.now()): Record<string, string> {
  return signedHeaders(keysAt(keys, now), eventId, body, USER_AGENT, now);
}
