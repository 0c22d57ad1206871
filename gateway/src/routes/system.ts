import type { FastifyInstance } from 'fastify';
import { AppError, BUS_HEALTH, checkHealth, CONSUMERS_HEALTH, healthOf } from '@svc/kit';
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
  let lastCheck: { at: number; down: string[]; services: Record<string, string>; reasons: Record<string, string> } | null = null;
  app.get('/readyz', async (request, reply) => {
    // A ready answer is reused for a second (probes come often); a not-ready one for a tenth of that, so that
    // readiness shows within ~100 ms of the last service coming up (start-up, a restart).
    if (!lastCheck || Date.now() - lastCheck.at > (lastCheck.down.length ? 100 : 1000)) {
      // Per service: up, down (unreachable, or its store is), bus_down (it serves; its events wait in its outbox), or
      // consumer_stalled (it serves; a handler waits on an unavailable dependency, and the events behind it wait).
      // A service's bus may say why it is down (Kafka refused the credentials, a certificate is not trusted).
      const reasons: Record<string, string> = {};
      const entries = await Promise.all(
        Object.entries(deps.clients).map(async ([name, client]) => {
          if (!(await checkHealth(client.grpcClient))) return [name, 'down'] as const;
          const bus = await healthOf(client.grpcClient, BUS_HEALTH);
          if (bus.reason) reasons[`${name} bus`] = bus.reason;
          if (!bus.serving) return [name, 'bus_down'] as const;
          return [name, (await checkHealth(client.grpcClient, CONSUMERS_HEALTH)) ? 'up' : 'consumer_stalled'] as const;
        }),
      );
      const services = Object.fromEntries(entries);
      const named = { down: '', bus_down: ' bus', consumer_stalled: ' consumers' } as const;
      const down = entries.filter(([, s]) => s !== 'up').map(([n, s]) => `${n}${named[s as keyof typeof named]}`);
      // Without identity's key set no access token can be verified yet.
      if (!(await keysLoaded())) down.push('identity keys');
      lastCheck = { at: Date.now(), services, down, reasons };
    }
    // Bearer tokens are refused (503) until the revocation feed has been read: not ready meanwhile.
    const down = [...lastCheck.down];
    if (deps.revocations && !deps.revocations.current) down.push('revocation feed');
    const { services } = lastCheck;
    // Redis away: the gateway counts rate limits locally and polls for revocations (decision 9), so it stays ready and
    // says it is degraded. Redis refusing its settings (credentials, ACL, TLS) is no outage to wait out: not ready.
    const redis = deps.redis?.problem();
    const reasons = redis ? { ...lastCheck.reasons, redis: redis.reason } : lastCheck.reasons;
    if (redis?.misconfigured) down.push('redis');
    if (down.length)
      return sendError(
        request,
        reply,
        new AppError(
          'SERVICE_UNAVAILABLE',
          `Not ready: ${down.map((d) => (reasons[d] ? `${d} (${reasons[d]})` : d)).join(', ')} unavailable`,
          {
            down,
            services,
            ...(Object.keys(reasons).length ? { reasons } : {}),
          },
        ),
      );
    return success(request, { status: 'ready', services, ...(redis ? { degraded: { redis: redis.reason } } : {}) });
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
