import type { FastifyRequest } from 'fastify';

/** At most this many characters of an end user's id are kept (CONTRACT.md 12). */
export const END_USER_MAX = 200;

/** The X-End-User header (CONTRACT.md 12): who the caller's own user is, kept by the request log. */
export function endUserOf(request: FastifyRequest): string {
  const v = request.headers['x-end-user'];
  return (Array.isArray(v) ? v[0] : (v ?? '')).slice(0, END_USER_MAX);
}
