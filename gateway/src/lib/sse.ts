/**
 * The tenant's open server-sent event streams on this gateway (SSE_STREAMS_PER_TENANT): one count for every SSE route
 * (`/v1` chat completions and responses, REST chat reply streams, pass-through streams, the live event stream, the
 * `/mcp` GET stream), so one tenant cannot hold every socket of a gateway whatever route it streams from. The place is
 * taken where it is checked, with no await between the check and the count, so a burst of concurrent requests cannot
 * pass the cap; it is freed once, when the response closes (however it ends: finished, refused, or its client gone).
 * Counted per gateway: it guards this process's sockets, as each gateway has its own. Below it, the writer those routes
 * share: one event's text (`sseEvent`), the first message of the service's stream (`firstEvent`), and the open
 * responses, each with its heartbeat and its one end, that a route ends on shutdown (`OpenStreams`).
 */
import type { ServerResponse } from 'node:http';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { AppError, errors, type ServerStream } from '@svc/kit';
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

/** One SSE event. JSON never contains a raw newline, so `data` is always one line. */
export function sseEvent(id: string, type: string, data: unknown): string {
  return `id: ${id}\nevent: ${type}\ndata: ${JSON.stringify(data)}\n\n`;
}

/** Resolves when the socket can take more, or is gone. */
function writable(res: ServerResponse): Promise<void> {
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

/** An open SSE response: writes wait for the socket (backpressure); `end` stops its heartbeat and ends it once. */
export interface SseWriter {
  readonly res: ServerResponse;
  /** The client is gone (or the response ended). */
  readonly closed: boolean;
  write(text: string): Promise<void>;
  end(): void;
}

/**
 * Reads the first message of a service's stream, the one that says the request was accepted: until it comes, a
 * refusal is an ordinary JSON error. A stream that ends first, or opens with something else, is cancelled and answered
 * 503 `endedEarly`. A read that throws needs nothing more: kit's ServerStream has already ended (or cancelled) the call.
 */
export async function firstEvent<T>(
  stream: ServerStream<T>,
  opens: (first: T) => boolean,
  endedEarly: string,
): Promise<{ first: T; events: AsyncIterator<T> }> {
  const events = stream[Symbol.asyncIterator]();
  const next = await events.next();
  if (next.done || !opens(next.value)) {
    stream.cancel();
    throw errors.unavailable(endedEarly);
  }
  return { first: next.value, events };
}

/** The SSE responses a route has open, ended when the gateway closes (an open one would hold the server open). */
export function openStreams(app: FastifyInstance): OpenStreams {
  const open = new OpenStreams();
  app.addHook('preClose', (done) => {
    open.endAll();
    done();
  });
  return open;
}

/** A kept response's one end (OpenStreams.keep). */
export interface StreamEnd {
  /** Stops what feeds the response (once) and ends it. */
  end(): void;
  /** It has ended: its client gone, `end()`, or the gateway closing. */
  readonly ended: boolean;
}

export class OpenStreams {
  private readonly ends = new Set<() => void>();

  /**
   * Keeps the open response `res` until it ends, however: its client gone, the returned `end()`, or the gateway
   * closing (`endAll`). `stop` (what feeds it stops) runs once, whichever comes first, and the response is forgotten.
   */
  keep(res: ServerResponse, stop: () => void): StreamEnd {
    let ended = false;
    const finish = () => {
      if (ended) return;
      ended = true;
      this.ends.delete(end);
      stop();
    };
    const end = () => {
      finish();
      res.end();
    };
    this.ends.add(end);
    res.once('close', finish);
    return {
      end,
      get ended() {
        return ended;
      },
    };
  }

  /**
   * Answers the reply with a 200 `text/event-stream` (the reply is hijacked: what Fastify set, such as the request id,
   * is kept), sends a comment every `keepAliveMs` so proxies and clients see a live connection, and keeps it until it
   * ends (`keep`): `onEnd` runs once then, however it ends, and the heartbeat stops. The headers are sent at once,
   * unless `headersWithFirstWrite` (the caller writes its first event right away): then they leave in the same
   * segment as that event, and the client wakes once for both.
   */
  sse(
    reply: FastifyReply,
    keepAliveMs: number,
    onEnd: () => void = () => {},
    headers: Record<string, string> = {},
    headersWithFirstWrite = false,
  ): SseWriter {
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, {
      ...(reply.getHeaders() as Record<string, string>),
      ...headers,
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      'x-accel-buffering': 'no',
      connection: 'keep-alive',
    });
    if (!headersWithFirstWrite) res.flushHeaders();
    const keepAlive = setInterval(() => res.write(': keep-alive\n\n'), keepAliveMs);
    const kept = this.keep(res, () => {
      clearInterval(keepAlive);
      onEnd();
    });
    return {
      res,
      get closed() {
        return kept.ended || res.destroyed;
      },
      async write(text) {
        if (!res.write(text)) await writable(res);
      },
      end: kept.end,
    };
  }

  /** Ends every open stream (the gateway is closing). */
  endAll(): void {
    for (const end of [...this.ends]) end();
  }
}
