import { createHmac } from 'node:crypto';
import type { eventsV1 } from '@svc/proto';

/**
 * The JSON form of `events.v1.Event` that receivers get: `{id, type, createdAt, tenantId, data}`, with `data` in
 * the shape of the API's own resources (a project as GET /projects/:id shows it, a user as /auth/me does).
 */
export function eventBody(event: eventsV1.Event): string {
  return JSON.stringify({ id: event.id, type: event.type, createdAt: event.createdAt, tenantId: event.tenantId, data: dataOf(event.data) });
}

function dataOf(data: eventsV1.Event['data']): Record<string, unknown> {
  switch (data?.$case) {
    case 'project': {
      const p = data.value;
      return { id: p.id, name: p.name, description: p.description, language: p.language, created_at: p.createdAt, updated_at: p.updatedAt };
    }
    case 'tenant':
      return { id: data.value.id, name: data.value.name, plan: data.value.plan, createdAt: data.value.createdAt };
    case 'user': {
      const u = data.value;
      return { id: u.id, email: u.email, name: u.name, role: u.role, createdAt: u.createdAt };
    }
    case 'deleted':
      return { id: data.value.id };
    case 'test':
      return { webhookId: data.value.webhookId, message: data.value.message };
    case 'agentRun': {
      const r = data.value;
      return {
        id: r.runId,
        agentId: r.agentId,
        projectId: r.projectId,
        status: r.status,
        output: r.output || null,
        error: r.error || null,
        usage: { inputTokens: r.inputTokens, outputTokens: r.outputTokens },
        startedAt: r.startedAt || null,
        completedAt: r.completedAt || null,
      };
    }
    case 'thresholdCrossed': {
      const t = data.value;
      return { kind: t.kind, threshold: t.threshold, value: t.value, ...(t.apiKeyId ? { apiKeyId: t.apiKeyId } : {}) };
    }
    default:
      return {};
  }
}

/** Standard Webhooks signature: `v1,` + base64 HMAC-SHA256 of `${id}.${timestamp}.${body}`, keyed with the secret's UTF-8 bytes. */
export function sign(secret: string, id: string, timestamp: number, body: string): string {
  return `v1,${createHmac('sha256', Buffer.from(secret, 'utf8')).update(`${id}.${timestamp}.${body}`).digest('base64')}`;
}

export const USER_AGENT = 'svc-webhooks/1.0';

/** The headers of one attempt; `webhook-id` is the event id, the same on every retry. */
export function deliveryHeaders(secret: string, eventId: string, body: string, now = Date.now()): Record<string, string> {
  const timestamp = Math.floor(now / 1000);
  return {
    'content-type': 'application/json',
    'user-agent': USER_AGENT,
    'webhook-id': eventId,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': sign(secret, eventId, timestamp, body),
  };
}
