import { errors, idempotent, isoBound, newId, nowIso, type CallContext, type EgressPolicy, type SecretBox, type Store } from '@svc/kit';
import { authed } from '@svc/contracts';
import { eventsV1, type webhooksV1 } from '@svc/proto';
import { deliveries, queue, webhookCap, webhooks, type WebhookDoc } from '../collections';
import { emitEndpointEvent } from '../endpoint-events';
import type { EventLog, Window } from '../event-log';
import type { EventStreams } from '../event-stream';
import { enqueue, enqueueExisting } from '../fanout';
import { eventBody } from '../payload';
import { recover } from '../recover';
import { generateSecret, sealSecret } from '../secrets';
import { Checks } from '../validate';
import { toDelivery, toStoredEvent, toWebhook } from '../views';

export interface HandlerDeps {
  store: Store;
  box: SecretBox;
  policy: EgressPolicy;
  /** New work was queued: the delivery loop looks at once. */
  onQueued: (webhookId: string) => void;
  /** A commit recorded an event in the outbox: the relay publishes it now. */
  onOutbox: () => void;
  log: EventLog;
  /** The live event streams (StreamEvents). */
  streams: EventStreams;
  /** Registrations a tenant may keep (WEBHOOKS_PER_TENANT). */
  maxPerTenant: number;
}

export function webhookHandlers({ store, box, policy, onQueued, onOutbox, log, streams, maxPerTenant }: HandlerDeps) {
  const hooks = store.collection(webhooks);
  const cap = webhookCap(store, maxPerTenant);

  /** The registration if it is the caller's; another tenant's id is not found, like a missing one. */
  async function own(id: string, tenantId: string): Promise<WebhookDoc> {
    const doc = id ? await hooks.get(id, { tenantId }) : null;
    if (!doc) throw errors.notFound('webhook', id);
    return doc;
  }

  return {
    async createWebhook(req: webhooksV1.CreateWebhookRequest, ctx: CallContext): Promise<webhooksV1.CreateWebhookResponse> {
      const { auth } = authed(ctx, 'unscoped');
      const c = new Checks();
      const events = c.events(req.events);
      // No secret given: one is generated, and returned this once.
      const generated = req.secret ? null : generateSecret();
      const secret = generated ?? c.secret(req.secret);
      const url = await c.url(req.url, policy);
      c.done();
      const now = nowIso();
      const doc: WebhookDoc = {
        id: newId('whk'),
        tenantId: auth.tid,
        url,
        events,
        ...sealSecret(box, secret),
        active: true,
        disabledReason: null,
        failingSince: null,
        createdAt: now,
        updatedAt: now,
      };
      // Once per Idempotency-Key, with the answer in the same transaction (sealed: it may hold the generated secret).
      const scope = { tenantId: auth.tid, operation: 'createWebhook', key: ctx.idempotencyKey, body: req };
      return idempotent<webhooksV1.CreateWebhookResponse>(
        store,
        scope,
        (commit) =>
          commit(
            async (tx) => {
              await cap.places(tx, auth.tid).take();
              await tx.collection(webhooks).insert(doc);
              return { webhook: toWebhook(doc), secret: generated ?? '' };
            },
            (body) => cap.transaction(auth.tid, (tx) => body(tx)),
          ),
        { seal: box },
      );
    },

    async listWebhooks(req: webhooksV1.ListWebhooksRequest, ctx: CallContext): Promise<webhooksV1.ListWebhooksResponse> {
      const { auth } = authed(ctx, 'unscoped');
      const page = await hooks.find({ tenantId: auth.tid }, { limit: req.limit || 20, cursor: req.cursor || null });
      return { webhooks: page.items.map(toWebhook), nextCursor: page.nextCursor ?? '' };
    },

    async getWebhook(req: webhooksV1.GetWebhookRequest, ctx: CallContext): Promise<webhooksV1.GetWebhookResponse> {
      const { auth } = authed(ctx, 'unscoped');
      return { webhook: toWebhook(await own(req.id, auth.tid)) };
    },

    async updateWebhook(req: webhooksV1.UpdateWebhookRequest, ctx: CallContext): Promise<webhooksV1.UpdateWebhookResponse> {
      const { auth } = authed(ctx, 'unscoped');
      const before = await own(req.id, auth.tid);
      const c = new Checks();
      const patch: Partial<WebhookDoc> = { updatedAt: nowIso() };
      if (req.setEvents) patch.events = c.events(req.events);
      // A secret set by hand replaces the current one at once, and ends a rotation's grace period.
      if (req.secret !== undefined) Object.assign(patch, sealSecret(box, c.secret(req.secret)), { previousSecret: null });
      if (req.url !== undefined) patch.url = await c.url(req.url, policy);
      c.done();
      // Enabling again starts with a clean record; disabling by hand carries no service reason.
      if (req.active !== undefined) Object.assign(patch, { active: req.active, disabledReason: null, failingSince: null });
      // Enabling a disabled registration announces it (webhook.endpoint_recovered), once: a compare-and-set on its
      // being disabled decides which of two enables at the same moment does.
      const { updated, announced } = await store.transaction(async (tx) => {
        const col = tx.collection(webhooks);
        const enabled =
          req.active === true && !before.active ? await col.update(req.id, { tenantId: auth.tid, active: false }, patch) : null;
        if (enabled) await emitEndpointEvent(tx, 'webhook.endpoint_recovered', enabled);
        return { updated: enabled ?? (await col.update(req.id, { tenantId: auth.tid }, patch)), announced: enabled !== null };
      });
      if (!updated) throw errors.notFound('webhook', req.id);
      if (announced) onOutbox();
      return { webhook: toWebhook(updated) };
    },

    async rotateWebhookSecret(
      req: webhooksV1.RotateWebhookSecretRequest,
      ctx: CallContext,
    ): Promise<webhooksV1.RotateWebhookSecretResponse> {
      const { auth } = authed(ctx, 'unscoped');
      const c = new Checks();
      const graceMs = c.graceMs(req.graceHours);
      c.done();
      const secret = generateSecret();
      // A compare-and-set on the secret read: of two rotations at once, the second builds on the first (whose secret
      // becomes the previous one) instead of both keeping the same previous secret and one new secret being lost.
      for (let attempt = 1; ; attempt++) {
        const before = await own(req.id, auth.tid);
        const graceEndsAt = graceMs > 0 ? new Date(Date.now() + graceMs).toISOString() : null;
        const previousSecret = graceEndsAt ? { sealed: before.secretSealed, whsec: before.secretWhsec === true, until: graceEndsAt } : null;
        const updated = await hooks.update(
          req.id,
          { tenantId: auth.tid, secretSealed: before.secretSealed },
          { ...sealSecret(box, secret), previousSecret, updatedAt: nowIso() },
        );
        if (updated) return { secret, graceEndsAt: graceEndsAt ?? '' };
        if (attempt === 3) throw errors.conflict('The secret is being changed by another request; try again');
      }
    },

    async deleteWebhook(req: webhooksV1.DeleteWebhookRequest, ctx: CallContext): Promise<webhooksV1.DeleteWebhookResponse> {
      const { auth } = authed(ctx, 'unscoped');
      const deleted = await cap.transaction(auth.tid, async (tx, places) => {
        if (!req.id || !(await tx.collection(webhooks).delete(req.id, { tenantId: auth.tid }))) return false;
        await places.free();
        await tx.collection(queue).deleteMany({ webhookId: req.id });
        await tx.collection(deliveries).deleteMany({ webhookId: req.id });
        return true;
      });
      if (!deleted) throw errors.notFound('webhook', req.id);
      return { id: req.id };
    },

    async listDeliveries(req: webhooksV1.ListDeliveriesRequest, ctx: CallContext): Promise<webhooksV1.ListDeliveriesResponse> {
      const { auth } = authed(ctx, 'unscoped');
      await own(req.webhookId, auth.tid);
      const page = await store
        .collection(deliveries)
        .find({ webhookId: req.webhookId }, { limit: req.limit || 20, cursor: req.cursor || null });
      return { deliveries: page.items.map(toDelivery), nextCursor: page.nextCursor ?? '' };
    },

    async sendTestEvent(req: webhooksV1.SendTestEventRequest, ctx: CallContext): Promise<webhooksV1.SendTestEventResponse> {
      const { auth } = authed(ctx, 'unscoped');
      const hook = await own(req.id, auth.tid);
      const event: eventsV1.Event = {
        id: newId('evt'),
        type: 'webhook.test',
        tenantId: auth.tid,
        createdAt: nowIso(),
        data: { $case: 'test', value: { webhookId: hook.id, message: 'This is a test event.' } },
      };
      const body = eventBody(event);
      const delivery = await store.transaction((tx) =>
        enqueue(tx, { tenantId: auth.tid, webhookId: hook.id, eventId: event.id, eventType: event.type, body, manual: true }),
      );
      onQueued(hook.id);
      return { delivery: toDelivery(delivery) };
    },

    async recoverWebhook(req: webhooksV1.RecoverWebhookRequest, ctx: CallContext): Promise<webhooksV1.RecoverWebhookResponse> {
      const { auth } = authed(ctx, 'unscoped');
      const hook = await own(req.id, auth.tid);
      const c = new Checks();
      const since = c.time('since', req.since, { required: true });
      const until = req.until ? c.time('until', req.until) : null;
      if (since && until && until.ms < since.ms) c.fail('until', 'must not be before since');
      c.done();
      const window: Window = {
        lower: isoBound(since!, 'atOrAfter'),
        upper: until ? isoBound(until, 'before') : { op: 'lt', iso: nowIso() },
      };
      return { queued: await recover({ store, log, onQueued, onOutbox }, hook, window) };
    },

    async listEvents(req: webhooksV1.ListEventsRequest, ctx: CallContext): Promise<webhooksV1.ListEventsResponse> {
      const { auth } = authed(ctx, 'events:read');
      const c = new Checks();
      const type = req.type ? c.eventType('type', req.type) : undefined;
      const after = req.after ? c.time('after', req.after) : null;
      const before = req.before ? c.time('before', req.before) : null;
      if (after && before && before.ms <= after.ms) c.fail('before', 'must be later than after');
      if (req.deliveryFailed && !req.webhookId) c.fail('webhookId', 'is required with deliveryFailed=true');
      if (!req.deliveryFailed && req.webhookId) c.fail('webhookId', 'filters only with deliveryFailed=true');
      c.done();
      const window: Window = {
        ...(after ? { lower: isoBound(after, 'after') } : {}),
        ...(before ? { upper: isoBound(before, 'before') } : {}),
      };
      const query = { tenantId: auth.tid, type, window, limit: req.limit || 20, cursor: req.cursor || null };
      const page = req.deliveryFailed ? await log.undelivered(await own(req.webhookId, auth.tid), query) : await log.list(query);
      return { events: page.items.map(toStoredEvent), nextCursor: page.nextCursor ?? '' };
    },

    async getEvent(req: webhooksV1.GetEventRequest, ctx: CallContext): Promise<webhooksV1.GetEventResponse> {
      const { auth } = authed(ctx, 'events:read');
      const doc = await log.get(auth.tid, req.id);
      if (!doc) throw errors.notFound('event', req.id);
      return { event: toStoredEvent(doc) };
    },

    streamEvents: (
      req: webhooksV1.StreamEventsRequest,
      ctx: CallContext,
      send: (m: webhooksV1.StreamEventsResponse) => Promise<void>,
      signal: AbortSignal,
    ): Promise<void> => {
      const { auth } = authed(ctx, 'events:read');
      return streams.serve(
        auth.tid,
        req.afterEventId,
        () => send({ open: true, event: undefined }),
        (e) => send({ open: false, event: toStoredEvent(e) }),
        signal,
      );
    },

    async retryDelivery(req: webhooksV1.RetryDeliveryRequest, ctx: CallContext): Promise<webhooksV1.RetryDeliveryResponse> {
      const { auth } = authed(ctx, 'unscoped');
      await own(req.webhookId, auth.tid);
      const col = store.collection(deliveries);
      const d = req.deliveryId ? await col.get(req.deliveryId, { webhookId: req.webhookId }) : null;
      if (!d) throw errors.notFound('delivery', req.deliveryId);
      if (d.status === 'pending') throw errors.conflict('The delivery is already scheduled', { status: d.status });
      const now = nowIso();
      const updated = await store.transaction(async (tx) => {
        // Compare-and-set on the status seen: of two concurrent re-sends one wins, the other is a conflict.
        const u = await tx
          .collection(deliveries)
          .update(d.id, { status: d.status }, { status: 'pending', manual: true, nextAttemptAt: now, updatedAt: now });
        if (u) await enqueueExisting(tx, u.id, u.webhookId, now);
        return u;
      });
      if (!updated) throw errors.conflict('The delivery is already scheduled', { status: 'pending' });
      onQueued(updated.webhookId);
      return { delivery: toDelivery(updated) };
    },
  };
}
