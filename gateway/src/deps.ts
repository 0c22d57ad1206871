import { createLogger, type ConnectionProblem, type JwtVerifier, type Logger } from '@svc/kit';
import { closeClients, createClients, serviceAddresses, type Clients } from './clients';
import { loadGatewayConfig, type GatewayConfig } from './config';
import type { CredentialResolver } from './lib/credentials';
import type { RateLimiter } from './lib/rate-limiter';
import type { ReadCaches } from './lib/read-cache';

/** What the gateway's routes and plugins are built with (its own module: routes import it, app.ts imports routes). */
export interface GatewayDeps {
  config: GatewayConfig;
  clients: Clients;
  resolver: CredentialResolver;
  /** The access token verifier: /readyz waits for its first key set. */
  verifier: JwtVerifier;
  /** Hot reads answered by the gateway, kept by the owners' feeds (lib/read-cache.ts). */
  caches: ReadCaches;
  limiter: RateLimiter;
  logger: Logger;
  /** Identity's revocation feed: /readyz is not ready until it has been read to its end (absent in bare test apps). */
  revocations?: { readonly current: boolean };
  /** Why the Redis clients are not connected, when REDIS_URL is set (/readyz: lib/redis-health.ts). */
  redis?: { problem(): ConnectionProblem | null };
}

/**
 * Deps to declare every route with and call none (the OpenAPI document, scans of the routes): the operator token is
 * set so the admin routes exist, and the clients connect on a first call that never comes. `close()` after.
 */
export function declaringDeps(name: string): { deps: GatewayDeps; close(): void } {
  const config = loadGatewayConfig({ PUBLIC_URL: 'http://localhost:8080', SVC_ADMIN_TOKEN: name });
  const clients = createClients(serviceAddresses({}), config.grpcDeadlineMs);
  const unused = null as never;
  const deps = {
    config,
    clients,
    resolver: unused,
    verifier: unused,
    limiter: unused,
    caches: unused,
    logger: createLogger(name, 'silent'),
  };
  return { deps, close: () => closeClients(clients) };
}
