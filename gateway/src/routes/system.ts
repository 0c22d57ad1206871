import type { FastifyInstance } from 'fastify';
import { AppError, BUS_HEALTH, checkHealth, CONSUMERS_HEALTH } from '@svc/kit';
import type { GatewayDeps } from '../deps';
import { sendError, success } from '../lib/envelope';
import { buildOpenApi } from '../lib/openapi';
import { routesOf } from '../lib/route';

/** Liveness, readiness, the JWKS and the OpenAPI document: no credential, no rate limit. */
export function systemRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  app.get('/healthz', async (request) => success(request, { status: 'ok' }));

  const keysLoaded = () =>
    deps.verifier.load().then(
      () => true,
      () => false,
    );
  let lastCheck: { at: number; down: string[]; services: Record<string, string> } | null = null;
  app.get('/readyz', async (request, reply) => {
    // A ready answer is reused for a second (probes come often); a not-ready one for a tenth of that, so that
    // readiness shows within ~100 ms of the last service coming up (start-up, a restart).
    if (!lastCheck || Date.now() - lastCheck.at > (lastCheck.down.length ? 100 : 1000)) {
      // Per service: up, down (unreachable, or its store is), bus_down (it serves; its events wait in its outbox), or
      // consumer_stalled (it serves; a handler waits on an unavailable dependency, and the events behind it wait).
      const entries = await Promise.all(
        Object.entries(deps.clients).map(async ([name, client]) => {
          if (!(await checkHealth(client.grpcClient))) return [name, 'down'] as const;
          if (!(await checkHealth(client.grpcClient, BUS_HEALTH))) return [name, 'bus_down'] as const;
          return [name, (await checkHealth(client.grpcClient, CONSUMERS_HEALTH)) ? 'up' : 'consumer_stalled'] as const;
        }),
      );
      const services = Object.fromEntries(entries);
      const named = { down: '', bus_down: ' bus', consumer_stalled: ' consumers' } as const;
      const down = entries.filter(([, s]) => s !== 'up').map(([n, s]) => `${n}${named[s as keyof typeof named]}`);
      // Without identity's key set no access token can be verified yet.
      if (!(await keysLoaded())) down.push('identity keys');
      lastCheck = { at: Date.now(), services, down };
    }
    // Bearer tokens are refused (503) until the revocation feed has been read: not ready meanwhile.
    const down = deps.revocations && !deps.revocations.current ? [...lastCheck.down, 'revocation feed'] : lastCheck.down;
    if (down.length)
      return sendError(
        request,
        reply,
        new AppError('SERVICE_UNAVAILABLE', `Not ready: ${down.join(', ')} unavailable`, {
          down,
          services: lastCheck.services,
        }),
      );
    return success(request, { status: 'ready', services: lastCheck.services });
  });

  let jwks: { at: number; body: unknown } | null = null;
  app.get('/.well-known/jwks.json', async (_request, reply) => {
    if (!jwks || Date.now() - jwks.at > 10_000) {
      const res = await deps.clients.identity.getJwks({});
      jwks = { at: Date.now(), body: JSON.parse(res.jwksJson) };
    }
    reply.header('Cache-Control', 'public, max-age=60');
    return jwks.body;
  });

  let doc: unknown = null;
  app.get('/api/v1/openapi.json', async () => (doc ??= buildOpenApi(routesOf(app), `${deps.config.publicUrl}`)));
}
