import * as grpc from '@grpc/grpc-js';
import { AppError, type ErrorCode, ERROR_CODES } from '../errors';
import { APP_ERROR_KEY, LEGACY_APP_ERROR_KEY, safeUserAgent, TOKEN_METADATA_KEY, USER_AGENT_METADATA_KEY } from './server';
import type { ReqOf, ResOf } from './types';

export interface CallOptions {
  /** The caller's JWT, sent as `authorization: Bearer`. */
  token?: string | null;
  requestId?: string;
  clientIp?: string | null;
  /** The client's User-Agent as the gateway saw it (x-client-user-agent), for the audit log. */
  userAgent?: string | null;
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
  ) => AsyncIterable<ResOf<D[K]>> & { cancel(): void };
};
export type ServiceClient<D> = UnaryMethods<D> & StreamMethods<D> & { readonly grpcClient: grpc.Client; close(): void };

export interface ClientOptions {
  deadlineMs: number;
}

/** A promise-based client for a ts-proto service definition: deadlines on every call, errors as AppError. */
export function createClient<D extends object>(definition: D, address: string, options: ClientOptions): ServiceClient<D> {
  const client = new grpc.Client(address, grpc.credentials.createInsecure(), {
    'grpc.keepalive_time_ms': 30_000,
    // A restarted peer (supervisor, pod) is found again within a second or two, not after grpc-js's 2-minute cap.
    'grpc.initial_reconnect_backoff_ms': 200,
    'grpc.max_reconnect_backoff_ms': 2_000,
    'grpc.max_receive_message_length': 4 * 1024 * 1024,
    // Several replicas behind one name (a headless Service's DNS, or `ipv4:a:1,b:2` in start:cluster): spread calls
    // over every ready one, and skip one that went away.
    'grpc.service_config': JSON.stringify({ loadBalancingConfig: [{ round_robin: {} }] }),
  });
  const out: Record<string, unknown> = { grpcClient: client, close: () => client.close() };
  for (const [name, def] of Object.entries(definition) as Array<[string, MethodDef]>) {
    out[name] = def.responseStream ? streamCaller(client, def, options) : unaryCaller(client, def, options);
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
  return md;
}

function unaryCaller(client: grpc.Client, def: MethodDef, defaults: ClientOptions) {
  return (req: unknown, options?: CallOptions) =>
    new Promise((resolve, reject) => {
      const deadline = Date.now() + (options?.deadlineMs ?? defaults.deadlineMs);
      const started = options?.timing ? performance.now() : 0;
      client.makeUnaryRequest(
        def.path,
        def.requestSerialize,
        def.responseDeserialize,
        req,
        metadataFor(options),
        { deadline },
        (err, res) => {
          if (options?.timing) options.timing.upstreamMs += performance.now() - started;
          if (err) reject(toAppError(err));
          else resolve(res);
        },
      );
    });
}

function streamCaller(client: grpc.Client, def: MethodDef, defaults: ClientOptions) {
  return (req: unknown, options?: CallOptions) => {
    const deadline = Date.now() + (options?.deadlineMs ?? defaults.deadlineMs);
    const call = client.makeServerStreamRequest(def.path, def.requestSerialize, def.responseDeserialize, req, metadataFor(options), {
      deadline,
    });
    return {
      cancel: () => call.cancel(),
      async *[Symbol.asyncIterator]() {
        try {
          for await (const message of call) yield message;
        } catch (err) {
          if ((err as grpc.ServiceError).code === grpc.status.CANCELLED) return;
          throw toAppError(err as grpc.ServiceError);
        }
      },
    };
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
export function checkHealth(client: grpc.Client, service = '', deadlineMs = 1000): Promise<boolean> {
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      '/grpc.health.v1.Health/Check',
      (v: { service: string }) => encodeHealthRequest(v.service),
      (b: Buffer) => b,
      { service },
      new grpc.Metadata(),
      { deadline: Date.now() + deadlineMs },
      (err, res) => resolve(!err && !!res && decodeHealthStatus(res) === 1),
    );
  });
}

// HealthCheckRequest { string service = 1 } and HealthCheckResponse { ServingStatus status = 1 } by hand:
// two fields are not worth a second code generator.
function encodeHealthRequest(service: string): Buffer {
  const bytes = Buffer.from(service, 'utf8');
  return bytes.length ? Buffer.concat([Buffer.from([0x0a, bytes.length]), bytes]) : Buffer.alloc(0);
}
function decodeHealthStatus(b: Buffer): number {
  return b.length >= 2 && b[0] === 0x08 ? b[1] : 0;
}
