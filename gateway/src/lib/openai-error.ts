import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AppError } from '@svc/kit';
import { logServerError } from './error-log';

/** OpenAI's error `type` for an HTTP status (what OpenAI clients switch on). */
function typeFor(status: number): string {
  if (status === 401) return 'authentication_error';
  if (status === 402) return 'insufficient_quota';
  if (status === 403) return 'permission_error';
  if (status === 404) return 'not_found_error';
  if (status === 429) return 'rate_limit_error';
  if (status >= 500) return 'server_error';
  return 'invalid_request_error';
}

/**
 * OpenAI's error shape (CONTRACT.md 9): `{error: {message, type, code, param}}`. `code` is the reason when there is
 * one (`key_budget_exhausted`, `api_key_required`, `model_not_found`...), else our error code in lower case; `param`
 * names the field at fault (`details.param`, else the first bad field). 5xx messages carry no internals.
 */
export function openAiErrorBody(err: AppError) {
  const status = err.httpStatus;
  const details = err.details as { reason?: unknown; fields?: Array<{ field?: unknown }>; param?: unknown };
  const param = typeof details.param === 'string' ? details.param : details.fields?.[0]?.field;
  return {
    error: {
      message: status === 500 ? 'Internal server error' : err.message,
      type: typeFor(status),
      code: typeof details.reason === 'string' ? details.reason : err.code.toLowerCase(),
      param: typeof param === 'string' ? param : null,
    },
  };
}

/** Errors under /v1 in OpenAI's shape, with the statuses of the rest of the API. */
export function sendOpenAiError(request: FastifyRequest, reply: FastifyReply, err: AppError): FastifyReply {
  logServerError(request, err);
  const status = err.httpStatus;
  const details = err.details as { retryAfterS?: unknown };
  if ((status === 429 || status === 503) && typeof details.retryAfterS === 'number' && !reply.hasHeader('retry-after'))
    reply.header('Retry-After', String(details.retryAfterS));
  return reply.code(status).type('application/json').send(openAiErrorBody(err));
}
