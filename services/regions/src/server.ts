import { egressPolicyFrom, openRuntime, registration, serve, type RunningService } from '@svc/kit';
import { identityVerifier, TOPICS } from '@svc/contracts';
import { regionsV1 } from '@svc/proto';
import { ALL_COLLECTIONS } from './collections';
import { parseCatalogue, regionsConfig } from './config';
import { regionHandlers } from './handlers';
import { planEventHandler } from './plan-events';
import { Catalogue } from './rules';

/** This service's consumer group on the bus: its position survives restarts. */
export const CONSUMER_GROUP = 'regions';

export async function startRegions(env: NodeJS.ProcessEnv = process.env): Promise<RunningService> {
  const rt = await openRuntime({ name: 'regions', defaultPort: 50055, config: regionsConfig, collections: ALL_COLLECTIONS, env });
  const catalogue = new Catalogue(parseCatalogue(rt.config.catalogue));
  const { verifier, identity } = identityVerifier(rt.config);
  const handle = planEventHandler(rt.store, rt.logger);
  return serve(rt, {
    verifier,
    healthNames: ['regions.v1.RegionsService'],
    subscriptions: [
      {
        group: CONSUMER_GROUP,
        topics: [TOPICS.identity, TOPICS.billing],
        // A failure leaves the message unacknowledged: the bus retries it, and the tenant's later events wait.
        handler: (message) =>
          handle(message).catch((err: unknown) => {
            rt.logger.warn({ err, eventId: message.id }, 'plan event failed; the bus will retry');
            throw err;
          }),
      },
    ],
    registrations: [
      registration({
        definition: regionsV1.RegionsServiceService,
        implementation: regionHandlers({
          store: rt.store,
          box: rt.box,
          catalogue,
          policy: egressPolicyFrom(rt.config),
          validateTimeoutMs: rt.config.validateTimeoutMs,
        }),
      }),
    ],
    onStop: async () => {
      identity.close();
    },
  });
}
