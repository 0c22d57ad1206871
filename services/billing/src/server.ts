import { openRuntime, registration, serve, type RunningService } from '@svc/kit';
import { identityVerifier, keptKeyLimits, TOPICS } from '@svc/contracts';
import { billingV1 } from '@svc/proto';
import { alertsHandlers } from './alerts';
import { ALL_COLLECTIONS } from './collections';
import { billingConfig } from './config';
import { billingConsumer } from './events';
import { keyUsageHandlers } from './key-usage';
import { billingHandlers } from './handlers';

import { paymentProvider } from './providers';
import { requestLog, RequestLog, requestLogHandlers } from './request-log';
import { DEFAULT_ESCROW_POLICY, EscrowSweeper } from './escrows';
import { ReservationSweeper } from './reservations';
import { usageAnalyticsHandlers, usageRollups } from './usage-analytics';

/** This service's consumer group on the bus: its position survives restarts. */
export const CONSUMER_GROUP = 'billing';

export async function startBilling(env: NodeJS.ProcessEnv = process.env): Promise<RunningService> {
  const rt = await openRuntime({
    name: 'billing',
    defaultPort: 50056,
    config: billingConfig,
    collections: [...ALL_COLLECTIONS, usageRollups, requestLog],
    env,
  });
  const { verifier, identity } = identityVerifier(rt.config);
  const consumer = billingConsumer(
    rt.store,
    { creditsPer1kTokens: rt.config.creditsPer1kTokens, startingGrant: rt.config.startingGrant },
    rt.logger,
  );
  const publicUrl = rt.config.publicUrl ?? `http://${rt.config.gatewayHost}:${rt.config.gatewayPort}`;
  const provider = paymentProvider({
    stripeSecretKey: rt.config.stripeSecretKey,
    stripeWebhookSecret: rt.config.stripeWebhookSecret,
    stripeApiUrl: rt.config.stripeApiUrl,
    publicUrl,
  });
  // Looks at least four times per TTL, at most every 5 s: an expiry comes within a quarter TTL (or 5 s) of its due.
  const sweeper = new ReservationSweeper(rt.store, rt.logger, Math.max(250, Math.min(5000, Math.floor(rt.config.reservationTtlMs / 4))));
  sweeper.start();
  const escrowPolicy = {
    ...DEFAULT_ESCROW_POLICY,
    leaseMs: rt.config.escrowLeaseMs,
    maxCredits: rt.config.escrowMaxCredits,
    graceMs: rt.config.reservationTtlMs,
  };
  const escrowSweeper = new EscrowSweeper(rt.store, rt.logger, Math.max(250, Math.min(5000, Math.floor(escrowPolicy.leaseMs / 2))));
  escrowSweeper.start();
  const calls = new RequestLog(rt.store, { retentionDays: rt.config.requestLogRetentionDays, logger: rt.logger });
  calls.start();
  return serve(rt, {
    verifier,
    healthNames: ['billing.v1.BillingService'],
    subscriptions: [
      {
        group: CONSUMER_GROUP,
        topics: [TOPICS.identity, TOPICS.agents, TOPICS.chat],
        // A failure leaves the message unacknowledged: the bus retries it (the ledger applies each source once).
        handler: (message) =>
          consumer.handler(message).catch((err: unknown) => {
            rt.logger.warn({ err, eventId: message.id }, 'billing event failed; the bus will retry');
            throw err;
          }),
        // A delivered batch in one transaction (its usage events settle many calls in one commit); when it fails,
        // the bus hands its messages to `handler` one by one.
        handleBatch: consumer.handleBatch,
      },
    ],
    registrations: [
      registration({
        definition: billingV1.BillingServiceService,
        implementation: {
          ...keyUsageHandlers(rt.store),
          ...alertsHandlers(rt.store),
          ...usageAnalyticsHandlers(rt.store),
          ...requestLogHandlers(calls),
          ...billingHandlers({
            store: rt.store,
            relay: rt.relay,
            adminToken: rt.config.adminToken,
            provider,
            creditPriceCents: rt.config.creditPriceCents,
            startingGrant: rt.config.startingGrant,
            creditsPer1kTokens: rt.config.creditsPer1kTokens,
            reservationTtlMs: rt.config.reservationTtlMs,
            escrowPolicy,
            keyLimits: keptKeyLimits(async (token) => (await identity.getCallerKeyLimits({}, { token })).limits, {
              onRefreshError: (err) =>
                rt.logger.debug({ err }, "refreshing a key's limits failed; the kept answer serves until its hard age"),
            }),
          }),
        },
        // The provider's signature, or the operator token in the request, is the credential of these.
        publicMethods: ['handleProviderWebhook', 'adminMintGiftCards', 'adminSetPlan', 'adminAdjustCredits'],
      }),
    ],
    onStop: async () => {
      await Promise.all([sweeper.stop(), escrowSweeper.stop(), calls.stop()]);
      identity.close();
    },
  });
}
