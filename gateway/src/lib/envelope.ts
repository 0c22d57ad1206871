import type { FastifyReply, FastifyRequest } from 'fastify';
import { type AppError, metrics } from '@svc/kit';
import { logServerError } from './error-log';
import { openAiErrorBody } from './openai-error';

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

/** The error envelope. 5xx messages never carry internals (the log has them). */
export function sendError(request: FastifyRequest, reply: FastifyReply, err: AppError): FastifyReply {
  logServerError(request, err);
  const status = err.httpStatus;
  const message = status === 500 ? 'Internal server error' : err.message;
  const details = status === 500 ? {} : err.details;
  if (status === 429) metrics.rateLimited.inc({ reason: typeof details.reason === 'string' ? details.reason : 'rate_limit' });
  // A service that asks the client to come back later says when (429 and 503 from a backing service).
  if ((status === 429 || status === 503) && typeof details.retryAfterS === 'number' && !reply.hasHeader('retry-after'))
    reply.header('Retry-After', String(details.retryAfterS));
  if (isOpenAiPath(request.url)) return reply.code(status).type('application/json').send(openAiErrorBody(err));
  return reply
    .code(status)
    .type('application/json')
    .send({ error: { code: err.code, message, details }, meta: meta(request) });
}
