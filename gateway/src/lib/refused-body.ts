import type { FastifyReply, FastifyRequest } from 'fastify';

/** A refused body up to this size is read off the wire and dropped; a larger one still closes the connection. */
export const DRAIN_LIMIT = 8 * 1024 * 1024;

/**
 * Fastify answers a body over the limit with `Connection: close` before reading it. The socket is then destroyed
 * while the client is still writing, and the client sees EPIPE or a reset instead of the 413 (a race it loses about
 * once in a few hundred large requests). Where the declared length is modest, keep the connection: Node reads the
 * rest of the unread body and drops it (`req._dump()` once the response is sent), and the client reads its 413.
 */
export function drainRefusedBody(request: FastifyRequest, reply: FastifyReply, code: string | undefined): void {
  if (code !== 'FST_ERR_CTP_BODY_TOO_LARGE' || reply.getHeader('connection') !== 'close') return;
  const declared = Number(request.headers['content-length']);
  if (Number.isFinite(declared) && declared <= DRAIN_LIMIT) reply.removeHeader('connection');
}
