import type { FastifyInstance, FastifyRequest } from 'fastify';
import { type AppError, causeFields } from '@svc/kit';

/** Requests whose 5xx has been logged with its error (so the net below does not log it again). */
const logged = new WeakSet<FastifyRequest>();

const fieldsOf = (request: FastifyRequest, status: number) => ({
  reqId: request.id,
  method: request.method,
  route: request.routeOptions.url ?? 'unmatched',
  tenantId: request.principal?.tenantId ?? null,
  status,
});

/**
 * Every 5xx the gateway answers is logged once, at error level, where it is sent (sendError, sendOpenAiError): its
 * request id, route, tenant, code, and what it was mapped from (a service's gRPC status and message, or the error
 * caught). Nothing of the request itself (headers, body) is logged.
 */
export function logServerError(request: FastifyRequest, err: AppError): void {
  if (err.httpStatus < 500) return;
  logged.add(request);
  request.log.error(
    { ...fieldsOf(request, err.httpStatus), code: err.code, message: err.message, ...causeFields(err) },
    'answered with a server error',
  );
}

/**
 * The net under it: a 5xx sent without an AppError (a provider's own 5xx relayed by the pass-through, Fastify's 503
 * while closing) is logged too, with what is known: no code, no cause.
 */
export function registerServerErrorLog(app: FastifyInstance): void {
  app.addHook('onResponse', (request, reply, done) => {
    if (reply.statusCode >= 500 && !logged.has(request))
      request.log.error({ ...fieldsOf(request, reply.statusCode), code: null }, 'answered with a server error');
    done();
  });
}
