/**
 * `Idempotency-Key` on every POST under /api/v1 and /v1 (CONTRACT.md 14), whichever gateway answers:
 *
 * - The key (1-255 printable ASCII) is scoped to the tenant, and to the API key when the caller uses one, and
 *   claimed in identity's store, which every gateway shares. A claim held by a request still running answers 409
 *   `idempotency_key_in_progress`; the key with another method, path or body answers 422 `idempotency_key_reused`.
 * - The answer is recorded before it leaves (onSend), so a retry that follows it is always a replay: the first status,
 *   content type and body, with `Idempotent-Replayed: true` and the first request's id.
 * - A 5xx, a 429, a 408 or a service's own 409 `idempotency_key_in_progress` (a `/v1` call whose reply has not ended,
 *   services/chat/src/calls/keyed.ts) is not an answer to keep: the claim is released and a retry runs again. The
 *   services whose work must not run twice record their own answer in the work's transaction under the same scoped
 *   key (sent as gRPC metadata, kit `idempotent`), so a retry after a crash between their commit and this answer
 *   finds it.
 * - A streamed answer (SSE, the pass-through) cannot be replayed: while it runs the key is held (409), afterwards
 *   the same request answers 409 `idempotency_key_streamed`.
 * - Bad input refused before the handler (validation, authentication, rate limits) claims nothing. A POST without a
 *   tenant (sign-in, registration, token refresh, CLI login) has nothing to keep the key for: its format is checked,
 *   nothing is stored (its answers carry fresh credentials, which must never be handed to a replay).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { errors, holderStarted, isAppError, newHolderId, sha256Hex, type CallOptions } from '@svc/kit';
import type { identityV1 } from '@svc/proto';
import type { Clients } from '../clients';

export const IDEMPOTENCY_HEADER = 'idempotency-key';
/** 1-255 printable ASCII characters. */
const KEY_SHAPE = /^[\x20-\x7e]{1,255}$/;
/** How often a claim is beaten while its request runs (identity takes a claim over after 30 s of silence). */
const BEAT_MS = 5_000;
/** This gateway process, as the holder of its claims (kit lease: gone from this host means taken over at once). */
const HOLDER = newHolderId();
holderStarted(HOLDER);

interface Hold {
  /** The key as scoped to the credential; also what services receive. */
  key: string;
  gen: number;
  call: CallOptions;
  beat: NodeJS.Timeout;
  settled: boolean;
  /** The answer is not to be kept (see settle). */
  release?: boolean;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The Idempotency-Key this request holds, once claimed. */
    idempotency: Hold | null;
  }
}

const covered = (request: FastifyRequest) =>
  request.method === 'POST' &&
  (request.url.startsWith('/api/v1/') || request.url.startsWith('/v1/')) &&
  request.routeOptions.config.access !== undefined;

/** What must be the same for an answer to be replayed: method, path with query, and the body as received. */
function fingerprint(request: FastifyRequest): string {
  const body = request.body;
  const bytes = body === undefined ? '' : Buffer.isBuffer(body) ? body.toString('base64') : JSON.stringify(body);
  return sha256Hex(`${request.method} ${request.url}\n${bytes}`);
}

export function registerIdempotency(app: FastifyInstance, clients: () => Pick<Clients, 'identity'>): void {
  app.decorateRequest('idempotency', null);

  // Callback style on purpose: a request without the header (nearly all) passes without a promise.
  app.addHook('preHandler', (request, reply, done) => {
    const raw = covered(request) ? request.headers[IDEMPOTENCY_HEADER] : undefined;
    if (raw === undefined) return done();
    // A replay has answered: the route's handler must not run (so `done` is not called).
    claim(request, reply, raw, clients().identity).then((replayed) => replayed || done(), done);
  });

  // A service's own "still in progress" answers nothing yet: a retry must reach the service again.
  app.addHook('onError', (request, _reply, err, done) => {
    if (request.idempotency && isAppError(err) && err.details.reason === 'idempotency_key_in_progress') request.idempotency.release = true;
    done();
  });

  app.addHook('onSend', (request, reply, payload, done) => {
    const hold = request.idempotency;
    if (!hold || hold.settled || !(typeof payload === 'string' || Buffer.isBuffer(payload))) return done(null, payload);
    const answer = payload.toString();
    void settle(request, clients().identity, reply.statusCode, answer, String(reply.getHeader('content-type') ?? '')).then(() =>
      done(null, payload),
    );
  });
}

type Identity = Pick<Clients, 'identity'>['identity'];

/** Claims the request's key; true when the first answer was replayed instead. */
async function claim(request: FastifyRequest, reply: FastifyReply, raw: string | string[], identity: Identity): Promise<boolean> {
  if (typeof raw !== 'string' || !KEY_SHAPE.test(raw))
    throw errors.validation([{ field: 'Idempotency-Key', message: 'must be 1 to 255 printable ASCII characters' }]);
  const principal = request.principal;
  if (!principal) return false;
  const owner = principal.type === 'api_key' ? `key:${principal.credentialId}` : 'tenant';
  const key = sha256Hex(`${principal.tenantId}|${owner}|${raw}`);
  const call: CallOptions = { token: principal.token, requestId: request.id };
  const claimed = await identity.claimIdempotencyKey({ key, fingerprint: fingerprint(request), holder: HOLDER }, call);
  if (claimed.outcome === 'replay') {
    replay(reply, claimed.answer!);
    return true;
  }
  const gen = claimed.gen;
  const beat = setInterval(() => void identity.beatIdempotencyKey({ key, gen }, call).catch(() => undefined), BEAT_MS).unref();
  request.idempotency = { key, gen, call, beat, settled: false };
  // A streamed or hijacked answer never reaches onSend as text: it is settled when its response closes.
  reply.raw.once('close', () => void settle(request, identity, reply.raw.statusCode, null));
  return false;
}

function replay(reply: FastifyReply, answer: identityV1.IdempotentAnswer): FastifyReply {
  if (answer.streamed)
    throw errors.conflict('The answer to this Idempotency-Key was streamed and cannot be replayed; use a new key', {
      reason: 'idempotency_key_streamed',
    });
  if (answer.requestId) reply.header('X-Request-Id', answer.requestId);
  reply.header('Idempotent-Replayed', 'true');
  if (answer.contentType) reply.type(answer.contentType);
  return reply.code(answer.status).send(answer.body);
}

/** Records the answer to replay, or releases the claim of one that a retry should run again. */
async function settle(request: FastifyRequest, identity: Identity, status: number, body: string | null, contentType = ''): Promise<void> {
  const hold = request.idempotency!;
  if (hold.settled) return;
  hold.settled = true;
  clearInterval(hold.beat);
  const release = hold.release === true || status >= 500 || status === 429 || status === 408;
  const answer = { status, contentType, body: body ?? '', requestId: request.id, streamed: body === null };
  try {
    await identity.finishIdempotencyKey({ key: hold.key, gen: hold.gen, release, answer: release ? undefined : answer }, hold.call);
  } catch (err) {
    // The claim then stays until its beat has stood still long enough to be taken over (identity's lease).
    request.log.warn({ err, reqId: request.id }, 'the answer to an Idempotency-Key could not be recorded');
  }
}
