import { capCounters, egressPolicyFrom, feedHeads, openRuntime, registration, serve, type RunningService } from '@svc/kit';
import { identityVerifier, TOPICS } from '@svc/contracts';
import { webhooksV1 } from '@svc/proto';
import { deliveries, eventOrder, events, queue, webhooks } from './collections';
import { parseRetrySchedule, webhooksConfig } from './config';
import { EventLog } from './event-log';
import { EventStreams } from './event-stream';
import { fanOut } from './fanout';
import { webhookHandlers } from './handlers';
import { DeliveryWorker } from './worker';

/** This service's consumer group on the bus: its position survives restarts. */
export const CONSUMER_GROUP = 'webhooks';

export interface WebhooksOptions {
  /** The event log's clock (epoch ms): what its retention counts from; for tests. */
  now?: () => number;
}

export async function startWebhooks(env: NodeJS.ProcessEnv = process.env, options: WebhooksOptions = {}): Promise<RunningService> {
  const rt = await openRuntime({
    name: 'webhooks',
    defaultPort: 50057,
    config: webhooksConfig,
    collections: [webhooks, deliveries, queue, events, eventOrder, feedHeads, capCounters],
    env,
  });
  const scheduleMs = parseRetrySchedule(rt.config.retrySchedule);
  const policy = egressPolicyFrom(rt.config);
  const { verifier, identity } = identityVerifier(rt.config);
  const worker = new DeliveryWorker({
    store: rt.store,
    box: rt.box,
    logger: rt.logger,
    policy,
    scheduleMs,
    timeoutMs: rt.config.deliveryTimeoutMs,
    concurrency: rt.config.concurrency,
    tenantConcurrency: rt.config.tenantConcurrency,
    onOutbox: () => rt.relay.notify(),
  });
  const onQueued = (webhookId: string) => worker.wake(webhookId);
  await worker.start();
  const log = new EventLog(rt.store, { retentionDays: rt.config.eventsRetentionDays, logger: rt.logger, now: options.now });
  log.start();
  const consumer = fanOut(rt.store, log, onQueued);
  const streams = new EventStreams({ log, wake: rt.wake });
  return serve(rt, {
    verifier,
    healthNames: ['webhooks.v1.WebhooksService'],
    subscriptions: [
      {
        group: CONSUMER_GROUP,
        topics: Object.values(TOPICS),
        // A failure leaves the message unacknowledged: the bus retries it, and later events of the tenant wait.
        handler: (message) =>
          consumer.handler(message).catch((err: unknown) => {
            rt.logger.warn({ err, eventId: message.id }, 'fan-out failed; the bus will retry');
            throw err;
          }),
        // A batch that fails is handled again message by message (through `handler`, which reports its failure).
        handleBatch: consumer.handleBatch,
      },
    ],
    registrations: [
      registration({
        definition: webhooksV1.WebhooksServiceService,
        implementation: webhookHandlers({
          store: rt.store,
          box: rt.box,
          policy,
          onQueued,
          onOutbox: () => rt.relay.notify(),
          log,
          streams,
          maxPerTenant: rt.config.maxWebhooksPerTenant,
        }),
      }),
    ],
    // Open event streams would hold the server's drain: they end first (the gateway ends its SSE responses).
    beforeStop: () => streams.stop(),
    onStop: async () => {
      await log.stop();
      await worker.stop();
      identity.close();
    },
  });
}
