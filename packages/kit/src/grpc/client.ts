import * as grpc from '@grpc/grpc-js';
import { AppError, type ErrorCode, ERROR_CODES } from '../errors';
import {
  APP_ERROR_KEY,
  HEALTH_REASON_KEY,
  IDEMPOTENCY_METADATA_KEY,
  LEGACY_APP_ERROR_KEY,
  MAX_MESSAGE_BYTES,
  safeUserAgent,
  STOP_ON_HALF_CLOSE_KEY,
  TOKEN_METADATA_KEY,
  USER_AGENT_METADATA_KEY,
} from './server';
import { type LocalMethod, type LocalServer, localMethod } from './local';
import { decodeCheckResponse, encodeCheckRequest } from './health';
import { StreamCall } from './stream-call';
import type { ReqOf, ResOf, ServerStream } from './types';

export interface CallOptions {
  /** The caller's JWT, sent as `authorization: Bearer`. */
  token?: string | null;
  requestId?: string;
  clientIp?: string | null;
  /** The client's User-Agent as the gateway saw it (x-client-user-agent), for the audit log. */
  userAgent?: string | null;
  /** The caller's Idempotency-Key as the gateway scoped it (a sha256 hex of tenant, credential and key). */
  idempotencyKey?: string | null;
  /** Overrides the client's default deadline. Every call has one. */
  deadlineMs?: number;
  /** Milliseconds spent waiting for services are added here (the gateway's Server-Timing `upstream`). */
  timing?: { upstreamMs: number };
}

type UnaryMethods<D> = {
  [K in keyof D as D[K] extends { responseStream: false } ? K : never]: (req: ReqOf<D[K]>, options?: CallOptions) => Promise<ResOf<D[K]>>;
};
type StreamMethods<D> = {
  [K in keyof D as D[K] extends { responseStream: true } ? K : never]: (
    req: ReqOf<D[K]>,
    options?: CallOptions,
  ) => ServerStream<ResOf<D[K]>>;
};
export type ServiceClient<D> = UnaryMethods<D> & StreamMethods<D> & { readonly grpcClient: grpc.Client; close(): void };

export interface ClientOptions {
  deadlineMs: number;
  /** How long a service has to say it ends streams on a half-close (STREAM_HEADERS_WAIT_MS by default). */
  streamHeadersWaitMs?: number;
}

const ROUND_ROBIN = JSON.stringify({ loadBalancingConfig: [{ round_robin: {} }] });

/** A promise-based client for a ts-proto service definition: deadlines on every call, errors as AppError. */
export function createClient<D extends object>(definition: D, address: string, options: ClientOptions): ServiceClient<D> {
  const client = new grpc.Client(address, grpc.credentials.createInsecure(), {
    'grpc.keepalive_time_ms': 30_000,
    // A restarted peer (supervisor, pod) is found again within a second or two, not after grpc-js's 2-minute cap.
    'grpc.initial_reconnect_backoff_ms': 200,
    'grpc.max_reconnect_backoff_ms': 2_000,
    'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
    // Channelz's per-call and per-message counters and timestamps: kit never serves channelz.
    'grpc.enable_channelz': 0,
    // Several replicas behind one name (`dns:///chat:50054` on a headless Service, or `ipv4:a:1,b:2` in
    // start:cluster): one connection to each, calls spread over every ready one, and one that went away skipped.
    'grpc.service_config': ROUND_ROBIN,
    // A connection that ends (the server's max connection age, a pod gone) makes round_robin resolve the name again:
    // at most this often, so replicas added by a scale-out are found within a connection age.
    'grpc.dns_min_time_between_resolutions_ms': 5_000,
  });
  // Streams asked to end and not ended yet: closing the client cancels them (it waits for no one).
  const ending = new Set<grpc.ClientDuplexStream<unknown, unknown>>();
  const close = () => {
    for (const c of ending) c.cancel();
    client.close();
  };
  const out: Record<string, unknown> = { grpcClient: client, close };
  for (const [name, def] of Object.entries(definition) as Array<[string, MethodDef]>) {
    out[name] = def.responseStream ? streamCaller(client, def, options, ending) : unaryCaller(client, address, def, options);
  }
  return out as ServiceClient<D>;
}

interface MethodDef {
  path: string;
  responseStream: boolean;
  requestSerialize: (v: unknown) => Buffer;
  responseDeserialize: (b: Buffer) => unknown;
}

function metadataFor(options: CallOptions | undefined): grpc.Metadata {
  const md = new grpc.Metadata();
  // Not `authorization`: HTTP/2 never indexes that header, so a ~500-byte JWT would cross (and be decoded) on every
  // call. Under its own key HPACK indexes it once per connection. See docs/decisions.md.
  if (options?.token) md.set(TOKEN_METADATA_KEY, options.token);
  if (options?.requestId) md.set('x-request-id', options.requestId);
  if (options?.clientIp) md.set('x-client-ip', options.clientIp);
  if (options?.userAgent) md.set(USER_AGENT_METADATA_KEY, safeUserAgent(options.userAgent));
  if (options?.idempotencyKey) md.set(IDEMPOTENCY_METADATA_KEY, options.idempotencyKey);
  return md;
}

/**
 * A call the server refused before reading it (HTTP/2 REFUSED_STREAM) never ran, so it may go again. It happens when a
 * call meets a connection the server is closing for its age: the GOAWAY and the new stream cross. grpc-js retries
 * such a call once, on another connection; when every connection aged at the same moment, that one is refused too.
 */
const REFUSED_DETAILS = 'Stream refused by server';
const REFUSED_ATTEMPTS = 5;
const refused = (err: grpc.ServiceError) => err.code === grpc.status.UNAVAILABLE && err.details === REFUSED_DETAILS;
/**
 * How long to wait before sending a refused call again after attempt `n`: a few turns of the event loop, so the client
 * reads the GOAWAY already on its socket and picks another connection rather than the closing one. Null when the
 * error is not a refusal, the attempts are spent, or the deadline would pass first.
 */
function refusedRetryDelay(err: grpc.ServiceError, n: number, deadline: number): number | null {
  if (n >= REFUSED_ATTEMPTS || !refused(err)) return null;
  const ms = 10 * n;
  return Date.now() + ms < deadline ? ms : null;
}

function unaryCaller(client: grpc.Client, address: string, def: MethodDef, defaults: ClientOptions) {
  return (req: unknown, options?: CallOptions) =>
    new Promise((resolve, reject) => {
      const deadline = Date.now() + (options?.deadlineMs ?? defaults.deadlineMs);
      const started = options?.timing ? performance.now() : 0;
      // A server of this process (the combined layout): called without the socket, as over it (local.ts).
      const local = localMethod(address, def.path);
      if (local)
        return callLocal(local, def, req, metadataFor(options), deadline, (err, res) => {
          if (options?.timing) options.timing.upstreamMs += performance.now() - started;
          if (err) reject(toAppError(err));
          else resolve(res);
        });
      const attempt = (n: number): unknown =>
        client.makeUnaryRequest(
          def.path,
          def.requestSerialize,
          def.responseDeserialize,
          req,
          metadataFor(options),
          { deadline },
          (err, res) => {
            const delay = err ? refusedRetryDelay(err, n, deadline) : null;
            if (delay !== null) return void setTimeout(attempt, delay, n + 1);
            if (options?.timing) options.timing.upstreamMs += performance.now() - started;
            if (err) reject(toAppError(err));
            else resolve(res);
          },
        );
      attempt(1);
    });
}

/** A status as the gRPC transport delivers it to a client. */
function statusError(status: Partial<grpc.StatusObject>): grpc.ServiceError {
  const code = status.code ?? grpc.status.UNKNOWN;
  const details = status.details ?? '';
  return Object.assign(new Error(`${code} ${grpc.status[code]}: ${details}`), {
    code,
    details,
    metadata: status.metadata ?? new grpc.Metadata(),
  });
}

/** A message as the receiving side takes it: at most MAX_MESSAGE_BYTES, else RESOURCE_EXHAUSTED as grpc-js answers. */
function received(bytes: Buffer): Buffer {
  if (bytes.length > MAX_MESSAGE_BYTES)
    throw statusError({
      code: grpc.status.RESOURCE_EXHAUSTED,
      details: `Received message larger than max (${bytes.length} vs ${MAX_MESSAGE_BYTES})`,
    });
  return bytes;
}

/**
 * A unary call to a server of this process (local.ts): the request and the answer cross as bytes, the server's wrapper
 * answers it, and `done` gets what the transport would have given (the deadline included). Started on a later
 * microtask, as a socket's call would be: nothing of the handler runs inside the caller's own code.
 */
function callLocal(
  local: { server: LocalServer; method: LocalMethod },
  def: MethodDef,
  req: unknown,
  metadata: grpc.Metadata,
  deadline: number,
  done: (err: grpc.ServiceError | null, res?: unknown) => void,
): void {
  let finished = false;
  const finish = (err: grpc.ServiceError | null, res?: unknown) => {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    done(err, res);
  };
  const timer = setTimeout(
    () => finish(statusError({ code: grpc.status.DEADLINE_EXCEEDED, details: 'Deadline exceeded' })),
    Math.max(0, deadline - Date.now()),
  );
  const failed = (err: unknown) =>
    finish(
      (err as grpc.ServiceError)?.code !== undefined
        ? (err as grpc.ServiceError)
        : statusError({ code: grpc.status.INTERNAL, details: String(err) }),
    );
  void Promise.resolve()
    .then(() => {
      const request = local.method.requestDeserialize(received(def.requestSerialize(req)));
      return local.server.track(local.method.call(request, metadata));
    })
    .then((answer) => {
      if (!answer.ok) return finish(statusError(answer.status));
      finish(null, def.responseDeserialize(received(local.method.responseSerialize(answer.value))));
    })
    .catch(failed);
}

/**
 * A server-streaming call made as kit's services serve it (STOP_ON_HALF_CLOSE_KEY, StreamCall): `cancel()` asks the
 * service to end it, `release()` (its final message read) lets it end by itself; neither resets the stream. Once
 * either has been called, the other does nothing. A consumer that leaves a `for await` early cancels it so.
 */
function streamCaller(
  client: grpc.Client,
  def: MethodDef,
  defaults: ClientOptions,
  ending: Set<grpc.ClientDuplexStream<unknown, unknown>>,
) {
  return (req: unknown, options?: CallOptions): ServerStream<unknown> => {
    const deadline = Date.now() + (options?.deadlineMs ?? defaults.deadlineMs);
    const open = () => {
      const md = metadataFor(options);
      md.set(STOP_ON_HALF_CLOSE_KEY, '1');
      return new StreamCall(
        client.makeBidiStreamRequest(def.path, def.requestSerialize, def.responseDeserialize, md, { deadline }),
        req,
        defaults.streamHeadersWaitMs,
      );
    };
    let attempt = open();
    let ended = false;
    const end = (stop: boolean) => {
      if (ended) return;
      ended = true;
      attempt.end(stop, ending);
    };
    const stream: ServerStream<unknown> = {
      cancel: () => end(true),
      release: () => end(false),
      async *[Symbol.asyncIterator]() {
        try {
          // Sent again only while nothing came back: a refused stream never reached the handler.
          for (let n = 1, received = false; ; n += 1) {
            try {
              for await (const message of attempt.call.iterator({ destroyOnReturn: false })) {
                received = true;
                // Given up: what still comes is read, not passed on.
                if (!ended) yield message;
              }
              return;
            } catch (err) {
              const e = err as grpc.ServiceError;
              if (ended || e.code === grpc.status.CANCELLED) return;
              const delay = received ? null : refusedRetryDelay(e, n, deadline);
              if (delay === null) throw toAppError(e);
              await new Promise((resolve) => setTimeout(resolve, delay));
              // Ended while waiting: no new call that nobody would end.
              if (ended) return;
              attempt = open();
            }
          }
        } finally {
          // Left before its end (a `break`, a `return()`): asked to end, not reset.
          if (!attempt.finished) stream.cancel();
        }
      },
    };
    return stream;
  };
}

/**
 * gRPC status -> AppError, with the status and its message as the error's cause (for the log of whoever answers
 * with it; never sent to a client).
 */
export function toAppError(err: grpc.ServiceError): AppError {
  const mapped = statusToAppError(err);
  return new AppError(mapped.code, mapped.message, mapped.details, {
    cause: { grpcCode: grpc.status[err.code] ?? String(err.code), grpcMessage: err.details ?? '' },
  });
}

/** The app error in trailing metadata wins; otherwise the status decides. */
function statusToAppError(err: grpc.ServiceError): AppError {
  const bytes = err.metadata?.get(APP_ERROR_KEY)[0];
  const raw = Buffer.isBuffer(bytes) ? bytes.toString('utf8') : err.metadata?.get(LEGACY_APP_ERROR_KEY)[0];
  if (typeof raw === 'string') {
    try {
      const parsed = JSON.parse(raw) as { code: ErrorCode; message: string; details: Record<string, unknown> };
      if (parsed.code in ERROR_CODES) return new AppError(parsed.code, parsed.message, parsed.details ?? {});
    } catch {
      // fall through to the status mapping
    }
  }
  switch (err.code) {
    case grpc.status.INVALID_ARGUMENT:
      return new AppError('VALIDATION_ERROR', 'Invalid request parameters');
    case grpc.status.UNAUTHENTICATED:
      return new AppError('UNAUTHORIZED', 'Authentication required');
    case grpc.status.PERMISSION_DENIED:
      return new AppError('FORBIDDEN', 'Not allowed');
    case grpc.status.NOT_FOUND:
      return new AppError('RESOURCE_NOT_FOUND', 'Resource not found');
    case grpc.status.ALREADY_EXISTS:
    case grpc.status.ABORTED:
      return new AppError('CONFLICT', 'Conflict');
    case grpc.status.FAILED_PRECONDITION:
      return new AppError('CONFLICT', 'Resource is not in the required state');
    case grpc.status.RESOURCE_EXHAUSTED:
      return new AppError('RATE_LIMIT_EXCEEDED', 'Too many requests');
    case grpc.status.UNAVAILABLE:
      // Down or restarting (the launcher and Kubernetes bring it back within seconds): worth retrying shortly.
      return new AppError('SERVICE_UNAVAILABLE', 'A backing service is unavailable', { reason: 'service_unavailable', retryAfterS: 1 });
    case grpc.status.DEADLINE_EXCEEDED:
      return new AppError('GATEWAY_TIMEOUT', 'A backing service did not answer in time');
    default:
      return new AppError('INTERNAL_ERROR', 'Internal server error');
  }
}

/** Asks a server's gRPC health service; resolves true when SERVING. */
export async function checkHealth(client: grpc.Client, service = '', deadlineMs = 1000): Promise<boolean> {
  return (await healthOf(client, service, deadlineMs)).serving;
}

/** Asks a server's gRPC health service; when not SERVING, `reason` is the server's word on why, if it gave one. */
export function healthOf(client: grpc.Client, service = '', deadlineMs = 1000): Promise<{ serving: boolean; reason?: string }> {
  return new Promise((resolve) => {
    let serving = false;
    const call = client.makeUnaryRequest(
      '/grpc.health.v1.Health/Check',
      encodeCheckRequest,
      decodeCheckResponse,
      { service },
      new grpc.Metadata(),
      { deadline: Date.now() + deadlineMs },
      (err, res) => (serving = !err && res?.status === 'SERVING'),
    );
    // After the callback; the reason travels in the trailers.
    call.on('status', (status: grpc.StatusObject) => {
      const reason = serving ? undefined : status.metadata.get(HEALTH_REASON_KEY)[0];
      resolve(reason === undefined ? { serving } : { serving, reason: String(reason) });
    });
  });
}
