import type { FastifyReply, FastifyRequest } from 'fastify';
import { AppError, metrics } from '@svc/kit';

export interface Pagination {
  limit: number;
  next_cursor: string | null;
  has_more: boolean;
}

export function meta(request: FastifyRequest, extra: Record<string, unknown> = {}) {
  return { request_id: request.id, timestamp: new Date().toISOString(), ...extra };
}

export function success(request: FastifyRequest, data: unknown, pagination?: Pagination) {
  return { data, meta: meta(request, pagination ? { pagination } : {}) };
}

/** Paths of the OpenAI-compatible API: their errors use OpenAI's shape (CONTRACT.md 9). */
export const isOpenAiPath = (url: string) => url === '/v1' || url.startsWith('/v1/') || url.startsWith('/v1?');

/** OpenAI's error `type` for an HTTP status (what OpenAI's clients read, beside the status). */
function openAiType(status: number): string {
  if (status === 401) return 'authentication_error';
  if (status === 402) return 'insufficient_quota';
  if (status === 403) return 'permission_error';
  if (status === 429) return 'rate_limit_error';
  if (status >= 500) return 'server_error';
  return 'invalid_request_error';
}

/**
 * An error in OpenAI's shape `{error: {message, type, code, param}}`: `code` is the reason when there is one
 * (`missing_scope`, `key_budget_exhausted`, `model_not_found`...), else our code in lower case; `param` the first
 * field at fault, else null.
 */
export function openAiErrorBody(err: AppError, message: string) {
  const d = err.details as { reason?: unknown; fields?: Array<{ field?: unknown }>; param?: unknown };
  const code = typeof d.reason === 'string' ? d.reason : err.code.toLowerCase();
  const field = typeof d.param === 'string' ? d.param : Array.isArray(d.fields) ? d.fields[0]?.field : undefined;
  return { error: { message, type: openAiType(err.httpStatus), code, param: typeof field === 'string' ? field : null } };
}

/** The error envelope. 5xx messages never carry internals. */
export function sendError(request: FastifyRequest, reply: FastifyReply, err: AppError): FastifyReply {
  const status = err.httpStatus;
  const message = status === 500 ? 'Internal server error' : err.message;
  const details = status === 500 ? {} : err.details;
  if (status === 429) metrics.rateLimited.inc({ reason: typeof details.reason === 'string' ? details.reason : 'rate_limit' });
  // A service that asks the client to come back later says when (429 and 503 from a backing service).
  if ((status === 429 || status === 503) && typeof details.retryAfterS === 'number' && !reply.hasHeader('retry-after'))
    reply.header('Retry-After', String(details.retryAfterS));
  if (isOpenAiPath(request.url))
    return reply
      .code(status)
      .type('application/json')
      .send(openAiErrorBody(status === 500 ? new AppError('INTERNAL_ERROR', message) : err, message));
  return reply
    .code(status)
    .type('application/json')
    .send({ error: { code: err.code, message, details }, meta: meta(request) });
}
