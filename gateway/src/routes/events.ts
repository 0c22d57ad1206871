import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { EVENT_TYPES, PUBLIC_EVENT_TYPES } from '@svc/contracts';
import { errors } from '@svc/kit';
import type { webhooksV1 } from '@svc/proto';
import type { GatewayDeps } from '../deps';
import { pageOf, route } from '../lib/route';
import { firstEvent, openStreams, sseEvent, tenantStreams } from '../lib/sse';
import { IdParams, Obj, PageQuery, Str, Timestamp } from '../schemas';

const Event = Obj({
  id: Type.String({ description: 'Also the webhook-id of its deliveries' }),
  type: Type.String(),
  createdAt: Timestamp,
  tenantId: Type.String(),
  data: Type.Object({}, { additionalProperties: true, description: 'Shaped by the type: its JSON Schema is in GET /event-types' }),
});

const EventType = Obj({
  type: Type.String(),
  description: Type.String({ description: 'When the event is emitted' }),
  version: Type.Integer({ description: 'Raised when `data` changes in a way a receiver must know about' }),
  schema: Type.Object({}, { additionalProperties: true, description: 'JSON Schema (draft 2020-12) of `data`' }),
});

const Iso = (description: string) => Str(1, 40, { description: `ISO 8601 date-time with a zone: ${description}` });

const EventsQuery = Obj({
  ...PageQuery.properties,
  type: Type.Optional(Str(1, 100, { description: `One event type: ${PUBLIC_EVENT_TYPES.join(', ')}` })),
  after: Type.Optional(Iso('events created after this time (exclusive)')),
  before: Type.Optional(Iso('events created before this time (exclusive)')),
  deliveryFailed: Type.Optional(
    Type.Boolean({
      description:
        'With webhookId: only events of its types, created after it, not delivered to it successfully (failed, pending, or never tried while it was disabled)',
    }),
  ),
  webhookId: Type.Optional(Str(1, 100, { description: 'The webhook deliveryFailed looks at' })),
});

/** The webhook body the event's deliveries send, as stored: JSON-equal to what receivers get. */
export function eventView(e: webhooksV1.StoredEvent): unknown {
  return JSON.parse(e.bodyJson);
}

/** The SSE form of a stored event: `id:` the event id, `event:` its type, `data:` the event as GET /events shows it. */
const eventSse = (e: webhooksV1.StoredEvent) => sseEvent(e.id, e.type, eventView(e));

/** The public events of the tenant and their catalogue (CONTRACT.md 10), and their live stream (14); scope events:read. */
export function eventRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { webhooks } = deps.clients;
  const streams = tenantStreams(deps);
  const open = openStreams(app);

  route(app, {
    method: 'GET',
    url: '/api/v1/events/stream',
    operationId: 'streamEvents',
    access: 'events:read',
    tag: 'events',
    summary:
      "The tenant's events as they happen, as server-sent events: `id` the event id, `event` its type, `data` the event as GET /events shows it. Last-Event-ID (or ?lastEventId=) resumes after that event with none missed and none twice (an unknown or expired id: 404); without it, from now. Counts against SSE_STREAMS_PER_TENANT; a comment every SSE_KEEPALIVE_MS.",
    query: Obj({ lastEventId: Type.Optional(Str(1, 200, { description: 'As the Last-Event-ID header (which wins)' })) }),
    produces: 'text/event-stream',
    handler: async ({ query, call, request, reply }) => {
      const header = request.headers['last-event-id'];
      const lastEventId = typeof header === 'string' && header !== '' ? header : (query.lastEventId ?? '');
      if (lastEventId.length > 200) throw errors.validation([{ field: 'Last-Event-ID', message: 'must be at most 200 characters' }]);
      streams.holdFor(reply);
      // No deadline: the stream lasts as long as its reader; the service ends it when it stops.
      const stream = webhooks.streamEvents({ afterEventId: lastEventId }, { ...call, deadlineMs: Infinity });
      // The service answers `open` once the start is known: until then a refusal (an unknown id) is a JSON error.
      const { events } = await firstEvent(stream, (m) => m.open, 'The webhooks service ended the event stream early');
      const sse = open.sse(reply, deps.config.sseKeepAliveMs, () => stream.cancel());
      try {
        for (;;) {
          const next = await events.next();
          if (next.done || sse.closed) break;
          if (next.value.event) await sse.write(eventSse(next.value.event));
        }
      } catch (err) {
        // The service went away (restarting, stopping): the reader reconnects with the last id it got.
        if (!sse.closed) request.log.warn({ err, reqId: request.id }, 'event stream ended by the service');
      } finally {
        sse.end();
      }
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/events',
    operationId: 'listEvents',
    access: 'events:read',
    tag: 'events',
    summary: `The tenant's events, newest first, as webhooks deliver them; kept EVENTS_RETENTION_DAYS (30)`,
    query: EventsQuery,
    list: true,
    response: Event,
    handler: async ({ query, call }) => {
      const res = await webhooks.listEvents(
        {
          type: query.type ?? '',
          after: query.after ?? '',
          before: query.before ?? '',
          limit: query.limit,
          cursor: query.cursor ?? '',
          deliveryFailed: query.deliveryFailed ?? false,
          webhookId: query.webhookId ?? '',
        },
        call,
      );
      return pageOf(res.events.map(eventView), query.limit, res.nextCursor);
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/events/:id',
    operationId: 'getEvent',
    access: 'events:read',
    tag: 'events',
    summary: 'One event, as its webhook deliveries send it',
    params: IdParams,
    response: Event,
    handler: async ({ params, call }) => eventView((await webhooks.getEvent({ id: params.id }, call)).event!),
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/event-types',
    operationId: 'listEventTypes',
    access: 'events:read',
    tag: 'events',
    summary: 'Every event type a webhook can subscribe to, with the JSON Schema of its data (not paginated)',
    response: Type.Array(EventType),
    // The catalogue is generated from the protobuf messages with the code (packages/proto): nothing to ask a service.
    handler: async () => EVENT_TYPES.map(({ type, description, version, schema }) => ({ type, description, version, schema })),
  });
}
