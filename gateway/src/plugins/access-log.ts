import type { FastifyInstance, FastifyRequest } from 'fastify';
import { tagRequestSpan } from '@svc/kit';

/** Who made the request, as far as the gateway knows: ids only (the principal, once authenticated). */
function identity(request: FastifyRequest) {
  const p = request.principal;
  return { requestId: request.id, tenantId: p?.tenantId, apiKeyId: p?.type === 'api_key' ? p.credentialId : undefined };
}

/**
 * One info line per answered request (4xx and 5xx included), so a customer's X-Request-Id finds its request: request
 * id, tenant, API key, method, route pattern (never the raw URL), status and latency. And the same ids on the request's
 * trace span. Both cheap: one pino line (no child logger), a few attribute sets.
 */
export function registerAccessLog(app: FastifyInstance): void {
  // The span is tagged before it ends (the HTTP instrumentation ends it as the response finishes): when the handler
  // runs (authenticated), or when the request fails (a refusal: 401, 403, 429, ...).
  app.addHook('preHandler', (request, _reply, done) => {
    tagRequestSpan(identity(request));
    done();
  });
  app.addHook('onError', (request, _reply, _err, done) => {
    tagRequestSpan(identity(request));
    done();
  });
  // After the response is sent (streams too, once they end), with the final status and time.
  app.addHook('onResponse', (request, reply, done) => {
    const { requestId, tenantId, apiKeyId } = identity(request);
    app.log.info(
      {
        reqId: requestId,
        tenantId,
        apiKeyId,
        method: request.method,
        route: request.routeOptions.url ?? 'unmatched',
        status: reply.statusCode,
        ms: Math.round(reply.elapsedTime * 10) / 10,
      },
      'request',
    );
    done();
  });
}
