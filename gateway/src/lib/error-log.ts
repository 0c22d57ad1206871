import type { FastifyRequest } from 'fastify';
import { type AppError, causeFields } from '@svc/kit';

/**
 * Every 5xx the gateway answers is logged once, at error level, where it is sent (sendError, sendOpenAiError): its
 * request id, route, tenant, code, and what it was mapped from (a service's gRPC status and message, or the error
 * caught). Nothing of the request itself (headers, body) is logged.
 */
export function logServerError(request: FastifyRequest, err: AppError): void {
  if (err.httpStatus < 500) return;
  request.log.error(
    {
      reqId: request.id,
      method: request.method,
      route: request.routeOptions.url ?? 'unmatched',
      tenantId: request.principal?.tenantId ?? null,
      status: err.httpStatus,
      code: err.code,
      message: err.message,
      ...causeFields(err),
    },
    'answered with a server error',
  );
}
