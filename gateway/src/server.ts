import type { FastifyInstance } from 'fastify';
import { createLogger, createRedisClient, JwtVerifier, jwksFrom, peersReady, serveMetrics, type Logger } from '@svc/kit';
import type { identityV1 } from '@svc/proto';
import { buildApp } from './app';
import { closeClients, createClients, serviceAddresses, type Clients } from './clients';
import { loadGatewayConfig, type GatewayConfig } from './config';
import { CredentialResolver } from './lib/credentials';
import { MemoryRateLimiter, RedisRateLimiter, type RateLimiter } from './lib/rate-limiter';
import { FeedFollower } from './lib/feed-follower';
import { ReadCache, type ReadCaches } from './lib/read-cache';
import { RevocationWatcher } from './lib/revocations';
import { RedisHealth } from './lib/redis-health';

/**
 * GET /tenant and GET /projects/:id from the gateway: identity records every change to a tenant (a plan applied, a
 * tenant closed) in the feed the gateway already follows; projects records every change and deletion in its own.
 * The projects feed is not yet followed: `projectFeed.start()` once the services are up.
 */
function readCaches(
  clients: Clients,
  watcher: RevocationWatcher,
  config: GatewayConfig,
  logger: Logger,
): ReadCaches & { projectFeed: FeedFollower } {
  const tenants = new ReadCache<identityV1.Tenant>({ name: 'tenants', ttlMs: 60_000, maxEntries: 10_000, current: () => watcher.current });
  watcher.onEntry((e) => {
    if (e.kind === 'tenant' || e.kind === 'tenant_changed') tenants.drop(e.subjectId);
  });
  const projectFeed = new FeedFollower(
    async (afterSeq, limit) => {
      const res = await clients.projects.listProjectChanges({ afterSeq, limit }, { deadlineMs: 2000 });
      return { entries: res.changes, lastSeq: res.lastSeq };
    },
    {
      name: 'project changes',
      pollMs: config.feedPollMs,
      pageSize: config.feedPageSize,
      logger,
      watch: () => clients.projects.watchProjectChanges({}, { deadlineMs: Infinity }),
    },
  );
  const projects = new ReadCache<unknown>({ name: 'projects', ttlMs: 60_000, maxEntries: 50_000, current: () => projectFeed.current });
  projectFeed.onEntry((e) => projects.drop(e.subjectId));
  return { tenants, projects, projectFeed };
}

/** The longest start-up waits for the first read of the revocation feed. */
const FIRST_READ_WAIT_MS = 5000;

export interface RunningGateway {
  app: FastifyInstance;
  port: number;
  url: string;
  config: GatewayConfig;
  /** The METRICS_PORT listener's port, when there is one. */
  metricsPort?: number;
  stop(): Promise<void>;
}

/** Wires the gateway: config, gRPC clients, credential and tenant caches and the feed that keeps them, rate limiter; then listens. */
export async function startGateway(env: NodeJS.ProcessEnv = process.env): Promise<RunningGateway> {
  const config = loadGatewayConfig(env);
  const logger = createLogger('gateway', config.logLevel);
  const clients = createClients(serviceAddresses(env), config.grpcDeadlineMs);

  // With REDIS_URL, several gateways share the rate limits and hear revocations at once (kit loads ioredis only then).
  const redisConfig = config.redisUrl ? { ...config, redisUrl: config.redisUrl } : null;
  const redis = redisConfig ? createRedisClient(redisConfig, { maxRetriesPerRequest: 1, enableOfflineQueue: false }) : null;
  const subscriber = redisConfig ? createRedisClient(redisConfig) : null;
  for (const r of [redis, subscriber]) r?.on('error', (err) => logger.warn({ err: err.message }, 'redis error'));
  const redisHealth = redis && subscriber ? new RedisHealth([redis, subscriber]) : undefined;

  const verifier = new JwtVerifier({
    issuer: config.jwtIssuer,
    audience: config.jwtAudience,
    fetchJwks: jwksFrom(async () => (await clients.identity.getJwks({})).jwksJson),
  });
  const revocationsAfter = async (afterSeq: number, limit: number) => {
    const res = await clients.identity.listRevocations({ afterSeq, limit }, { deadlineMs: 2000 });
    return { entries: res.revocations, lastSeq: res.lastSeq };
  };
  const watcher = new RevocationWatcher(revocationsAfter, {
    pollMs: config.revocationPollMs,
    pageSize: config.feedPageSize,
    logger,
    subscriber,
    // No deadline: the stream stays open for as long as both sides run.
    watch: () => clients.identity.watchRevocations({}, { deadlineMs: Infinity }),
  });
  const resolver = new CredentialResolver((credential) => clients.identity.authenticate({ credential }), verifier, watcher);
  const caches = readCaches(clients, watcher, config, logger);
  const limiter: RateLimiter = redis
    ? new RedisRateLimiter(redis, config.rateLimitMax, config.rateLimitWindowS, logger)
    : new MemoryRateLimiter(config.rateLimitMax, config.rateLimitWindowS);

  // Listeners are registered: read the revocation feed, and listen once it has been read to its end, so that the
  // first request is decided on it. Bounded: with identity unreachable the gateway still comes up (health answers;
  // a bearer token is refused with 503 until the feed is read, see CredentialResolver). The token key set is fetched
  // meanwhile rather than at the first request; /readyz reports not ready until it is loaded.
  const app = buildApp({ config, clients, resolver, verifier, limiter, logger, caches, revocations: watcher, redis: redisHealth });
  await app.ready(); // routes and their validators compiled while the services may still be starting
  await peersReady(env);
  verifier.load().catch((err: Error) => logger.warn({ err: err.message }, 'token keys not loaded yet; will retry'));
  watcher.start();
  caches.projectFeed.start();
  await watcher.untilCurrent(FIRST_READ_WAIT_MS);
  await app.listen({ port: config.port, host: config.httpHost });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : config.port;
  // With PORT=0 the public address is known only now.
  if (!env.PUBLIC_URL) config.publicUrl = `http://${config.httpHost}:${port}`;
  const exporter = config.metricsPort === undefined ? null : await serveMetrics(config.metricsPort, config.metricsHost);
  logger.info({ port, metricsPort: exporter?.port }, 'gateway listening');
  return {
    app,
    port,
    metricsPort: exporter?.port,
    url: `http://${config.httpHost}:${port}`,
    config,
    async stop() {
      watcher.stop();
      caches.projectFeed.stop();
      exporter?.server.close();
      await app.close();
      closeClients(clients);
      redis?.disconnect();
    },
  };
}
