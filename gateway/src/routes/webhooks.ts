import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { PUBLIC_EVENT_TYPES } from '@svc/contracts';
import type { webhooksV1 } from '@svc/proto';
import type { GatewayDeps } from '../deps';
import { VERIFY_WEBHOOK_MARKDOWN } from '../docs/webhook-verification';
import { pageOf, route } from '../lib/route';
import { IdParams, Nullable, Obj, PageQuery, Str, Timestamp } from '../schemas';

const Webhook = Obj({
  id: Type.String(),
  url: Type.String(),
  events: Type.Array(Type.String()),
  active: Type.Boolean(),
  disabledReason: Nullable(Type.String({ description: 'Why the service disabled it; null when active or disabled by the user' })),
  createdAt: Timestamp,
  updatedAt: Timestamp,
});

const Attempt = Obj({
  number: Type.Integer(),
  at: Timestamp,
  statusCode: Nullable(Type.Integer({ description: "The receiver's HTTP status; null when it did not answer" })),
  latencyMs: Type.Integer(),
  error: Nullable(Type.String({ description: 'Transport error or egress refusal' })),
  responseExcerpt: Type.String({ description: 'The first 1 KiB of the response body' }),
});

const Delivery = Obj({
  id: Type.String(),
  webhookId: Type.String(),
  eventId: Type.String({ description: 'Sent as the webhook-id header, the same on every attempt' }),
  eventType: Type.String(),
  status: Type.Union(['pending', 'succeeded', 'failed'].map((s) => Type.Literal(s))),
  attempts: Type.Array(Attempt),
  nextAttemptAt: Nullable(Timestamp),
  createdAt: Timestamp,
  updatedAt: Timestamp,
});

const Fields = {
  url: Str(1, 2048, { description: 'http(s) address that receives the events' }),
  events: Type.Array(Str(1, 100), { minItems: 1, maxItems: 50, description: `Event names: ${PUBLIC_EVENT_TYPES.join(', ')}` }),
  secret: Str(8, 512, {
    description:
      'Shared secret, never returned: `whsec_<base64 of 24-64 bytes>` (Standard Webhooks: the HMAC key is the decoded bytes) or any other string, one that only starts with `whsec_` included (the key is its UTF-8 bytes)',
  }),
};

const GeneratedSecret = Type.String({
  description: 'A generated `whsec_<base64 of 32 random bytes>` secret: shown this once, never again',
  pattern: '^whsec_[A-Za-z0-9+/]{43}=$',
});

const CreatedWebhook = Type.Intersect([
  Webhook,
  Obj({
    secret: Type.Optional({
      ...GeneratedSecret,
      description: 'Present when the request gave no secret: the generated one, shown this once',
    }),
  }),
]);

const DeliveryParams = Obj({ id: Str(1, 100), deliveryId: Str(1, 100) });

export function webhookView(w: webhooksV1.Webhook) {
  return {
    id: w.id,
    url: w.url,
    events: w.events,
    active: w.active,
    disabledReason: w.disabledReason || null,
    createdAt: w.createdAt,
    updatedAt: w.updatedAt,
  };
}

export function deliveryView(d: webhooksV1.Delivery) {
  return {
    id: d.id,
    webhookId: d.webhookId,
    eventId: d.eventId,
    eventType: d.eventType,
    status: d.status,
    attempts: d.attempts.map((a) => ({
      number: a.number,
      at: a.at,
      statusCode: a.statusCode || null,
      latencyMs: a.latencyMs,
      error: a.error || null,
      responseExcerpt: a.responseExcerpt,
    })),
    nextAttemptAt: d.nextAttemptAt || null,
    createdAt: d.createdAt,
    updatedAt: d.updatedAt,
  };
}

/** Webhooks (CONTRACT.md 5): a credential with no scope list (CONTRACT.md 3), so the `unscoped` policy throughout. */
export function webhookRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { webhooks } = deps.clients;

  route(app, {
    method: 'POST',
    url: '/api/v1/webhooks',
    operationId: 'createWebhook',
    access: 'unscoped',
    tag: 'webhooks',
    summary: 'Register a webhook; without a `secret`, one is generated and returned once',
    description: VERIFY_WEBHOOK_MARKDOWN,
    status: 201,
    body: Obj({ url: Fields.url, events: Fields.events, secret: Type.Optional(Fields.secret) }),
    response: CreatedWebhook,
    handler: async ({ body, call }) => {
      const res = await webhooks.createWebhook({ url: body.url, events: body.events, secret: body.secret ?? '' }, call);
      return { ...webhookView(res.webhook!), ...(res.secret ? { secret: res.secret } : {}) };
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/webhooks',
    operationId: 'listWebhooks',
    access: 'unscoped',
    tag: 'webhooks',
    summary: 'Webhooks, newest first',
    query: PageQuery,
    list: true,
    response: Webhook,
    handler: async ({ query, call }) => {
      const res = await webhooks.listWebhooks({ limit: query.limit, cursor: query.cursor ?? '' }, call);
      return pageOf(res.webhooks.map(webhookView), query.limit, res.nextCursor);
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/webhooks/:id',
    operationId: 'getWebhook',
    access: 'unscoped',
    tag: 'webhooks',
    summary: 'One webhook',
    params: IdParams,
    response: Webhook,
    handler: async ({ params, call }) => webhookView((await webhooks.getWebhook({ id: params.id }, call)).webhook!),
  });

  route(app, {
    method: 'PATCH',
    url: '/api/v1/webhooks/:id',
    operationId: 'updateWebhook',
    access: 'unscoped',
    tag: 'webhooks',
    summary: 'Change a webhook; `active: true` enables a disabled one again',
    params: IdParams,
    body: Obj({
      url: Type.Optional(Fields.url),
      events: Type.Optional(Fields.events),
      secret: Type.Optional(Fields.secret),
      active: Type.Optional(Type.Boolean()),
    }),
    response: Webhook,
    handler: async ({ params, body, call }) =>
      webhookView(
        (
          await webhooks.updateWebhook(
            {
              id: params.id,
              url: body.url,
              events: body.events ?? [],
              setEvents: body.events !== undefined,
              secret: body.secret,
              active: body.active,
            },
            call,
          )
        ).webhook!,
      ),
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/webhooks/:id/rotate-secret',
    operationId: 'rotateWebhookSecret',
    access: 'unscoped',
    tag: 'webhooks',
    summary: 'Generate a new secret (returned once); the previous one also signs until the grace period ends',
    description: VERIFY_WEBHOOK_MARKDOWN,
    params: IdParams,
    optionalBody: true,
    body: Obj({
      graceHours: Type.Optional(
        Type.Number({
          minimum: 0,
          maximum: 168,
          default: 24,
          description: 'Hours the previous secret keeps signing beside the new one (fractions allowed); 0: it stops at once',
        }),
      ),
    }),
    response: Obj({
      secret: GeneratedSecret,
      graceEndsAt: Nullable(Timestamp, { description: 'When the previous secret stops signing; null when it stopped at once' }),
    }),
    handler: async ({ params, body, call }) => {
      const res = await webhooks.rotateWebhookSecret({ id: params.id, graceHours: body.graceHours }, call);
      return { secret: res.secret, graceEndsAt: res.graceEndsAt || null };
    },
  });

  route(app, {
    method: 'DELETE',
    url: '/api/v1/webhooks/:id',
    operationId: 'deleteWebhook',
    access: 'unscoped',
    tag: 'webhooks',
    summary: 'Delete a webhook and its deliveries',
    params: IdParams,
    response: Obj({ id: Type.String(), deleted: Type.Boolean() }),
    handler: async ({ params, call }) => ({ id: (await webhooks.deleteWebhook({ id: params.id }, call)).id, deleted: true }),
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/webhooks/:id/deliveries',
    operationId: 'listWebhookDeliveries',
    access: 'unscoped',
    tag: 'webhooks',
    summary: 'Deliveries of a webhook with every attempt, newest first',
    params: IdParams,
    query: PageQuery,
    list: true,
    response: Delivery,
    handler: async ({ params, query, call }) => {
      const res = await webhooks.listDeliveries({ webhookId: params.id, limit: query.limit, cursor: query.cursor ?? '' }, call);
      return pageOf(res.deliveries.map(deliveryView), query.limit, res.nextCursor);
    },
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/webhooks/:id/test',
    operationId: 'testWebhook',
    access: 'unscoped',
    tag: 'webhooks',
    summary: 'Queue a `webhook.test` event to this webhook (one attempt, sent even when disabled)',
    status: 202,
    params: IdParams,
    response: Delivery,
    handler: async ({ params, call }) => deliveryView((await webhooks.sendTestEvent({ id: params.id }, call)).delivery!),
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/webhooks/:id/recover',
    operationId: 'recoverWebhook',
    access: 'unscoped',
    tag: 'webhooks',
    summary:
      'Deliver once more every subscribed event of a window that did not reach the webhook (original ids, usual retry schedule, oldest first); enables a disabled one',
    status: 202,
    params: IdParams,
    body: Obj({
      since: Str(1, 40, { description: 'ISO 8601 date-time with a zone: events created at or after it' }),
      until: Type.Optional(Str(1, 40, { description: 'ISO 8601 date-time with a zone: events created before it (default: now)' })),
    }),
    response: Obj({ queued: Type.Integer({ description: 'Deliveries queued' }) }),
    handler: async ({ params, body, call }) => ({
      queued: (await webhooks.recoverWebhook({ id: params.id, since: body.since, until: body.until ?? '' }, call)).queued,
    }),
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/webhooks/:id/deliveries/:deliveryId/retry',
    operationId: 'retryWebhookDelivery',
    access: 'unscoped',
    tag: 'webhooks',
    summary: 'Send a finished delivery again: one more attempt, same webhook-id (409 while one is scheduled)',
    status: 202,
    params: DeliveryParams,
    response: Delivery,
    handler: async ({ params, call }) =>
      deliveryView((await webhooks.retryDelivery({ webhookId: params.id, deliveryId: params.deliveryId }, call)).delivery!),
  });
}
