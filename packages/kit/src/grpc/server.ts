import * as grpc from '@grpc/grpc-js';
import { randomUUID } from 'node:crypto';
import { AppError, causeFields, ERROR_CODES, isAppError } from '../errors';
import type { JwtVerifier } from '../jwt';
import type { Logger } from '../logger';
import { DuplicateKeyError, InvalidCursorError } from '../storage/types';
import { metrics } from '../metrics';
import { type LocalAnswer, type LocalMethod, registerLocal } from './local';
import { HEALTH_DEFINITION, HealthStatuses } from './health';
import { addReflection, HEALTH_SERVICE } from './reflection';
import type { CallContext, Implementation } from './types';

/**
 * Trailing metadata key carrying `{code, message, details}` of an AppError to the caller, as UTF-8 JSON bytes. A
 * `-bin` key: grpc-js throws on a text value that is not printable ASCII, and details echo caller input (ids).
 */
export const APP_ERROR_KEY = 'x-app-error-bin';
/** The text key of earlier versions, still read by clients during a rolling upgrade. */
export const LEGACY_APP_ERROR_KEY = 'x-app-error';
/** Trailer of a health Check answer: why that name is not serving (fixed words for /readyz, printable ASCII). */
export const HEALTH_REASON_KEY = 'x-health-reason';
/** Request ids travel in metadata and logs: anything else is replaced (the gateway applies the same rule). */
const SAFE_REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/;
const SAFE_CLIENT_IP = /^[0-9A-Fa-f:.]{2,45}$/;
/** Metadata key of the request's Idempotency-Key as the gateway scoped it: a sha256 in hex, anything else ignored. */
export const IDEMPOTENCY_METADATA_KEY = 'x-idempotency-key';
const SCOPED_IDEMPOTENCY_KEY = /^[0-9a-f]{64}$/;
/** Metadata key of the client's User-Agent (the gateway passes it on for the audit log). */
export const USER_AGENT_METADATA_KEY = 'x-client-user-agent';
/** A User-Agent as metadata may carry it: printable ASCII, at most 256 characters. */
export function safeUserAgent(value: string): string {
  return value.replace(/[^\x20-\x7e]/g, '?').slice(0, 256);
}
/** Counts a finished call and its duration (svc_grpc_server_handled_total, svc_grpc_server_handling_seconds). */
function observe(path: string, started: number, code: grpc.status | undefined): void {
  metrics.grpcHandled.inc({ method: path, code: grpc.status[code ?? grpc.status.OK] });
  metrics.grpcDuration.observe({ method: path }, (performance.now() - started) / 1000);
}

/**
 * Metadata (value `1`) of a call to a server-streaming method whose client will ask for the stream's end by
 * half-closing its side; the service answers with it in its response headers, at once, when it will do so. Kit's
 * client sends the request and, told so, keeps its side open; to give a stream up before its end it half-closes, the
 * handler's signal aborts, and the service ends the call with OK on the same stream. A stream ended by the client (a
 * cancel) crosses as an HTTP/2 RST_STREAM, and Node's HTTP/2 server closes the whole connection with
 * GOAWAY(INTERNAL_ERROR), failing every call on it, past about 1,000 of them at over 33 a second (nghttp2's
 * rapid-reset guard, CVE-2023-44487). A client without it (grpcurl, any standard one) half-closes after its request as
 * gRPC's server streaming has it, and the stream runs to its own end. See docs/decisions.md.
 */
export const STOP_ON_HALF_CLOSE_KEY = 'x-stop-on-half-close';

const STOPS_ON_HALF_CLOSE = new grpc.Metadata();
STOPS_ON_HALF_CLOSE.set(STOP_ON_HALF_CLOSE_KEY, '1');

/**
 * The definition grpc-js serves: each server-streaming method as a bidi one (the same path and messages on the
 * wire), so the handler starts on the request message and then sees the client's half-close.
 */
function servedDefinition(definition: object): grpc.ServiceDefinition {
  const served: Record<string, unknown> = {};
  for (const [name, def] of Object.entries(definition) as Array<[string, { responseStream: boolean }]>)
    served[name] = def.responseStream ? { ...def, requestStream: true } : def;
  return served as grpc.ServiceDefinition;
}

/** Metadata key of the caller's JWT between our processes; `authorization: Bearer` is accepted too (grpcurl). */
export const TOKEN_METADATA_KEY = 'svc-token';

export interface ServiceRegistration<D> {
  definition: D;
  implementation: Implementation<D>;
  /** Methods callable without a JWT (sign-in, credential resolution, JWKS). */
  publicMethods?: Array<keyof D & string>;
}

export interface GrpcServerOptions {
  host: string;
  port: number;
  logger: Logger;
  verifier: JwtVerifier;
  /** Name used in the health service (`<package>.<Service>`); '' is the whole server. */
  healthNames: string[];
  /**
   * A connection older than this (±10 % jitter) is sent a GOAWAY: clients open a new one and re-resolve the service's
   * name, so replicas added since spread the load (a client otherwise keeps its first connections for ever).
   * 0: never.
   */
  maxConnectionAgeMs?: number;
  /** After the GOAWAY, calls still running on the old connection (chat replies, watches) have this long to finish. */
  maxConnectionAgeGraceMs?: number;
  /**
   * Unary calls from clients of this same process are answered without the loopback socket (local.ts; the combined
   * layout's service-to-service calls). False: every call crosses the socket (GRPC_IN_PROCESS=false).
   */
  inProcess?: boolean;
}

/** The largest message a kit server or client receives (grpc-js's max_receive_message_length). */
export const MAX_MESSAGE_BYTES = 4 * 1024 * 1024;

/** Defaults of GrpcServerOptions' connection ages (GRPC_MAX_CONNECTION_AGE_MS, GRPC_MAX_CONNECTION_AGE_GRACE_MS). */
export const DEFAULT_MAX_CONNECTION_AGE_MS = 5 * 60_000;
export const DEFAULT_MAX_CONNECTION_AGE_GRACE_MS = 10 * 60_000;

/** grpc-js server options: message size and connection ages. */
export function grpcServerOptions(options: Pick<GrpcServerOptions, 'maxConnectionAgeMs' | 'maxConnectionAgeGraceMs'>): grpc.ServerOptions {
  const age = options.maxConnectionAgeMs ?? DEFAULT_MAX_CONNECTION_AGE_MS;
  return {
    'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
    // Channelz (grpc-js's introspection service, which kit never serves) keeps per-call and per-message counters and
    // timestamps on every server, socket and call: CPU on each call's way for nothing.
    'grpc.enable_channelz': 0,
    ...(age > 0
      ? {
          'grpc.max_connection_age_ms': age,
          'grpc.max_connection_age_grace_ms': options.maxConnectionAgeGraceMs ?? DEFAULT_MAX_CONNECTION_AGE_GRACE_MS,
        }
      : {}),
  };
}

export class GrpcServer {
  readonly server: grpc.Server;
  readonly health: HealthStatuses;
  port = 0;
  /** Fully qualified names of the services added (`chat.v1.ChatService`): what reflection lists. */
  private readonly services = new Set<string>();
  /** The unary methods as this process's clients call them without the socket (local.ts), by path. */
  private readonly localMethods = new Map<string, LocalMethod>();
  /** Those calls not answered yet: a graceful stop waits for them as for its gRPC calls. */
  private readonly localCalls = new Set<Promise<unknown>>();
  private unregisterLocal: () => void = () => undefined;

  constructor(private readonly options: GrpcServerOptions) {
    this.server = new grpc.Server(grpcServerOptions(options));
    const statuses: Record<string, 'SERVING'> = { '': 'SERVING' };
    for (const name of options.healthNames) statuses[name] = 'SERVING';
    this.health = new HealthStatuses(statuses);
    // Every status change shows on svc_health_serving too (the readiness alert reads it).
    const setStatus = this.health.setStatus.bind(this.health);
    this.health.setStatus = (name, status) => {
      metrics.healthServing.set({ check: name }, status === 'SERVING' ? 1 : 0);
      setStatus(name, status);
    };
    for (const name of Object.keys(statuses)) metrics.healthServing.set({ check: name }, 1);
    // Check answers after `refreshHealth` (statuses measured when asked, not by a timer, so an idle service probes
    // nothing), with the reason of a name not serving in its trailers.
    const handlers = this.health.handlers();
    const check = handlers.check as grpc.handleUnaryCall<{ service: string }, unknown>;
    this.server.addService(HEALTH_DEFINITION, {
      ...handlers,
      check: (call: grpc.ServerUnaryCall<{ service: string }, unknown>, callback: grpc.sendUnaryData<unknown>) => {
        const service = call.request?.service ?? '';
        const refreshed = this.refreshHealth ? this.refreshHealth(service).catch(() => undefined) : Promise.resolve();
        void refreshed.then(() => check(call, (err, value) => callback(err, value, this.reasonOf(service))));
      },
    });
  }

  /** Measures the status of the service name asked about before a health Check is answered (set by the runtime). */
  refreshHealth: ((service: string) => Promise<void>) | null = null;
  /** Why a name is not serving, sent with its Check answer (HEALTH_REASON_KEY in the trailers; set by the runtime). */
  healthReason: ((service: string) => string | undefined) | null = null;

  private reasonOf(service: string): grpc.Metadata | undefined {
    const reason = this.healthReason?.(service);
    if (!reason) return undefined;
    const trailer = new grpc.Metadata();
    trailer.set(HEALTH_REASON_KEY, reason);
    return trailer;
  }

  add<D extends object>(registration: ServiceRegistration<D>): this {
    const handlers: grpc.UntypedServiceImplementation = {};
    const publicMethods = new Set<string>(registration.publicMethods ?? []);
    for (const [name, def] of Object.entries(registration.definition) as Array<[string, ServedMethod]>) {
      const impl = (registration.implementation as Record<string, (...args: never[]) => Promise<unknown>>)[name];
      if (!impl) throw new Error(`no implementation for ${def.path}`);
      const isPublic = publicMethods.has(name);
      if (def.responseStream) handlers[name] = this.wrapStream(def.path, isPublic, impl as never);
      else {
        const unary = this.wrapUnary(def.path, isPublic, impl as never);
        handlers[name] = unary;
        this.localMethods.set(def.path, localMethodOf(def, unary));
      }
    }
    this.server.addService(servedDefinition(registration.definition), handlers);
    for (const def of Object.values(registration.definition) as Array<{ path: string }>) this.services.add(def.path.split('/')[1]);
    return this;
  }

  /** Binds the port, with server reflection listing the health service and every service added. */
  async start(): Promise<number> {
    addReflection(this.server, [HEALTH_SERVICE, ...this.services]);
    this.port = await new Promise<number>((resolve, reject) =>
      this.server.bindAsync(`${this.options.host}:${this.options.port}`, grpc.ServerCredentials.createInsecure(), (err, port) =>
        err ? reject(err) : resolve(port),
      ),
    );
    if (this.options.inProcess ?? true)
      this.unregisterLocal = registerLocal(this.options.host, this.port, {
        methods: this.localMethods,
        track: (work) => {
          this.localCalls.add(work);
          void work.finally(() => this.localCalls.delete(work));
          return work;
        },
      });
    return this.port;
  }

  /** Graceful stop: report NOT_SERVING, finish in-flight calls (up to `graceMs`), then force. */
  async stop(graceMs = 5000): Promise<void> {
    // Calls from this process go over the socket from now on, and meet the shutdown as any other caller's do.
    this.unregisterLocal();
    for (const name of ['', ...this.options.healthNames]) this.health.setStatus(name, 'NOT_SERVING');
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.server.forceShutdown();
        resolve();
      }, graceMs);
      // In-flight calls finish first, the gRPC ones and those made in-process alike.
      const local = Promise.allSettled([...this.localCalls]);
      this.server.tryShutdown(() => {
        void local.then(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    });
  }

  private async context(
    call: grpc.ServerUnaryCall<unknown, unknown> | grpc.ServerDuplexStream<unknown, unknown>,
    isPublic: boolean,
  ): Promise<CallContext> {
    const md = call.metadata;
    const requestId = requestIdOf(md) ?? randomUUID();
    const rawIp = md.get('x-client-ip')[0];
    const clientIp = typeof rawIp === 'string' && SAFE_CLIENT_IP.test(rawIp) ? rawIp : null;
    const rawKey = md.get(IDEMPOTENCY_METADATA_KEY)[0];
    const idempotencyKey = typeof rawKey === 'string' && SCOPED_IDEMPOTENCY_KEY.test(rawKey) ? rawKey : null;
    const rawUa = md.get(USER_AGENT_METADATA_KEY)[0];
    const userAgent = typeof rawUa === 'string' && rawUa ? safeUserAgent(rawUa) : null;
    const header = md.get('authorization')[0] as string | undefined;
    const token = (md.get(TOKEN_METADATA_KEY)[0] as string | undefined) ?? (header?.startsWith('Bearer ') ? header.slice(7) : null);
    if (!token) {
      if (isPublic) return { auth: null, token: null, requestId, clientIp, userAgent, idempotencyKey, metadata: md };
      throw new AppError('UNAUTHORIZED', 'Authentication required');
    }
    try {
      const auth = await this.options.verifier.verify(token);
      return { auth, token, requestId, clientIp, userAgent, idempotencyKey, metadata: md };
    } catch (err) {
      if (isPublic) return { auth: null, token: null, requestId, clientIp, userAgent, idempotencyKey, metadata: md };
      throw err;
    }
  }

  private wrapUnary(
    path: string,
    isPublic: boolean,
    impl: (req: unknown, ctx: CallContext) => Promise<unknown>,
  ): grpc.handleUnaryCall<unknown, unknown> {
    return (call, callback) => {
      let answered = false;
      const started = performance.now();
      const answer = (err: Partial<grpc.StatusObject> | null, res?: unknown) => {
        if (answered) return;
        answered = true;
        observe(path, started, err?.code);
        callback(err, res);
      };
      // Whatever throws (the handler, the error mapping, serialising the answer), the call gets an error answer and
      // the process goes on: one request must never end a service.
      this.context(call, isPublic)
        .then((ctx) => impl(call.request, ctx))
        .then(
          (res) => answer(null, res),
          (err) => answer(this.toServiceError(path, err, call.metadata)),
        )
        .catch((err: unknown) => this.failSafe(path, err, call.metadata, (status) => answer(status)));
    };
  }

  /**
   * A server-streaming method, served as a bidi call (see STOP_ON_HALF_CLOSE_KEY): its first message is the request;
   * a client that marked the call asks for its end by half-closing, which aborts the handler's signal, and the call
   * then ends with OK on the same stream. A call reset by the client (a real cancel, its deadline) gets no status.
   */
  private wrapStream(
    path: string,
    isPublic: boolean,
    impl: (req: unknown, ctx: CallContext, send: (m: unknown) => Promise<void>, signal: AbortSignal) => Promise<void>,
  ): grpc.handleBidiStreamingCall<unknown, unknown> {
    return (call) => {
      const abort = new AbortController();
      const started = performance.now();
      let reset = false;
      // Its status is on the way: grpc-js says 'cancelled' after sending any status (1.14), which is no reset.
      let answered = false;
      const stopsOnHalfClose = call.metadata.get(STOP_ON_HALF_CLOSE_KEY)[0] === '1';
      // Said at once, in the response headers: the client keeps its side open only when it knows.
      if (stopsOnHalfClose) call.sendMetadata(STOPS_ON_HALF_CLOSE);
      let received = false;
      const request = new Promise<unknown>((resolve, reject) => {
        // Read on (further messages are ignored) so that the half-close is seen.
        call.on('data', (message: unknown) => {
          if (!received) resolve(message);
          received = true;
        });
        call.on('end', () => {
          if (!received) reject(new AppError('VALIDATION_ERROR', 'The call carried no request message'));
          else if (stopsOnHalfClose) abort.abort();
        });
        call.on('cancelled', () => {
          if (answered) return;
          reset = true;
          abort.abort();
          if (!received) reject(new Error('cancelled before its request'));
        });
      });
      const send = (message: unknown) =>
        new Promise<void>((resolve) => {
          if (abort.signal.aborted || call.write(message)) resolve();
          else call.once('drain', () => resolve());
        });
      Promise.all([this.context(call, isPublic), request])
        // Stopped before it started: nothing to run.
        .then(([ctx, req]) => (abort.signal.aborted ? undefined : impl(req, ctx, send, abort.signal)))
        .then(
          () => {
            observe(path, started, reset ? grpc.status.CANCELLED : grpc.status.OK);
            answered = true;
            if (!reset) call.end();
          },
          (err) => {
            answered = true;
            if (reset) return observe(path, started, grpc.status.CANCELLED);
            const status = this.toServiceError(path, err, call.metadata);
            observe(path, started, abort.signal.aborted ? grpc.status.CANCELLED : status.code);
            // Asked to stop, the call ends with OK whatever the handler threw on the way out (its abort).
            if (abort.signal.aborted) call.end();
            // Not destroy(): a destroyed stream never sends its status, and the client would wait forever. grpc-js
            // turns an 'error' event into the trailing status.
            else call.emit('error', status);
          },
        )
        .catch((err: unknown) =>
          this.failSafe(path, err, call.metadata, (status) => {
            if (!reset) call.emit('error', status);
          }),
        );
    };
  }

  /**
   * Last line of defence when answering itself failed: log (never rethrow) and answer with a bare INTERNAL status,
   * which carries no caller input and so cannot fail again.
   */
  private failSafe(path: string, err: unknown, md: grpc.Metadata, send: (status: Partial<grpc.StatusObject>) => void): void {
    try {
      this.options.logger.error({ err, path, reqId: requestIdOf(md) }, 'answering a gRPC call failed');
    } catch {
      // a logger that throws must not take the process with it
    }
    try {
      send({ code: grpc.status.INTERNAL, details: 'Internal server error' });
    } catch {
      // the call is gone; nothing left to answer
    }
  }

  /**
   * Domain error -> gRPC status with the app error in trailing metadata. The one mapping place in services. An
   * answer of INTERNAL (a bug, or an INTERNAL passed on from a peer) is logged with the caller's request id.
   */
  private toServiceError(path: string, err: unknown, md: grpc.Metadata): Partial<grpc.StatusObject> {
    let appError: AppError;
    if (isAppError(err)) appError = err;
    else if (err instanceof DuplicateKeyError) appError = new AppError('CONFLICT', 'Resource already exists', { fields: err.fields });
    else if (err instanceof InvalidCursorError)
      appError = new AppError('VALIDATION_ERROR', 'Invalid request parameters', { fields: [{ field: 'cursor', message: 'is not valid' }] });
    else appError = new AppError('INTERNAL_ERROR', 'Internal server error');
    if (appError.code === 'INTERNAL_ERROR')
      this.options.logger.error(
        { path, reqId: requestIdOf(md), code: appError.code, ...(isAppError(err) ? causeFields(err) : { err }) },
        'gRPC call answered INTERNAL',
      );
    const metadata = new grpc.Metadata();
    metadata.set(APP_ERROR_KEY, Buffer.from(JSON.stringify({ code: appError.code, message: appError.message, details: appError.details })));
    // The status message is text metadata too (grpc-message is percent-encoded by grpc-js, but keep it ASCII).
    return { code: ERROR_CODES[appError.code].grpc, details: asciiOnly(appError.message), metadata };
  }
}

type ServedMethod = Pick<LocalMethod, 'requestDeserialize' | 'responseSerialize'> & { path: string; responseStream: boolean };

/** A unary method as local.ts calls it: its codecs, and the wrapped handler given what grpc-js would give it. */
function localMethodOf(
  { requestDeserialize, responseSerialize }: ServedMethod,
  handler: grpc.handleUnaryCall<unknown, unknown>,
): LocalMethod {
  return {
    requestDeserialize,
    responseSerialize,
    call: (request, metadata) =>
      new Promise<LocalAnswer>((resolve) =>
        handler({ request, metadata } as grpc.ServerUnaryCall<unknown, unknown>, (err, value) =>
          resolve(err ? { ok: false, status: err as Partial<grpc.StatusObject> } : { ok: true, value }),
        ),
      ),
  };
}

/** The caller's request id from call metadata, when it is a safe one. */
function requestIdOf(md: grpc.Metadata): string | undefined {
  const raw = md.get('x-request-id')[0];
  return typeof raw === 'string' && SAFE_REQUEST_ID.test(raw) ? raw : undefined;
}

function asciiOnly(text: string): string {
  return text.replace(/[^\x20-\x7e]/g, '?');
}

/** Type-checks a registration against its definition, then erases the type for lists of registrations. */
export function registration<D extends object>(r: ServiceRegistration<D>): ServiceRegistration<object> {
  return r as unknown as ServiceRegistration<object>;
}
