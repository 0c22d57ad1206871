/**
 * The tenant's open server-sent event streams on this gateway (SSE_STREAMS_PER_TENANT): one count for every SSE route
 * (`/v1` chat completions and responses, REST chat reply streams, pass-through streams), so one tenant cannot hold
 * every socket of a gateway whatever route it streams from. The place is taken where it is checked, with no await
 * between the check and the count, so a burst of concurrent requests cannot pass the cap; it is freed once, when
 * the response closes (however it ends: finished, refused, or its client gone). Counted per gateway: it guards this
 * process's sockets, as each gateway has its own.
 */
import type { FastifyReply } from 'fastify';
import type { ServerResponse } from 'node:http';
import { AppError } from '@svc/kit';
import type { GatewayDeps } from '../deps';

export class TenantStreams {
  private readonly held = new Map<string, number>();

  constructor(readonly max: number) {}

  /** Takes a place for one stream of the tenant, or refuses with 429 `too_many_streams`; the release frees it once. */
  take(tenantId: string): () => void {
    const n = this.held.get(tenantId) ?? 0;
    if (n >= this.max)
      throw new AppError('RATE_LIMIT_EXCEEDED', `At most ${this.max} streams can be open at once; close one first`, {
        reason: 'too_many_streams',
        limit: this.max,
        retryAfterS: 1,
      });
    this.held.set(tenantId, n + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.held.get(tenantId) ?? 1) - 1;
      if (left > 0) this.held.set(tenantId, left);
      else this.held.delete(tenantId);
    };
  }

  /** Takes a place for the stream this reply will carry, freed when its response closes. */
  holdFor(reply: FastifyReply): void {
    const release = this.take(reply.request.principal!.tenantId);
    if (reply.raw.closed) release();
    else reply.raw.once('close', release);
  }

  /** The tenant's open streams (tests, metrics). */
  count(tenantId: string): number {
    return this.held.get(tenantId) ?? 0;
  }
}

const registries = new WeakMap<GatewayDeps, TenantStreams>();

/** The gateway's one registry (its routes share `deps`). */
export function tenantStreams(deps: GatewayDeps): TenantStreams {
  let found = registries.get(deps);
  if (!found) registries.set(deps, (found = new TenantStreams(deps.config.sseStreamsPerTenant)));
  return found;
}

/** Resolves when the socket can take more, or is gone (an SSE writer's back-pressure). */
export function writable(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}
