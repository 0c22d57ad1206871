import type { Metadata } from '@grpc/grpc-js';
import type { AuthClaims } from '../jwt';

/** What a handler knows about the call besides the request message. */
export interface CallContext {
  /** Verified claims of the caller's JWT; null only for methods declared public. */
  auth: AuthClaims | null;
  /** The raw JWT, to pass on when this service calls another on the caller's behalf. */
  token: string | null;
  requestId: string;
  /** Client address as the gateway saw it (x-client-ip), for audit and allowlists. */
  clientIp: string | null;
  /** Client User-Agent as the gateway saw it (x-client-user-agent), for audit. */
  userAgent?: string | null;
  /**
   * The request's Idempotency-Key, scoped by the gateway to the tenant and credential (x-idempotency-key): work that
   * must not run twice records its answer under it in its own transaction (kit `idempotent`).
   */
  idempotencyKey?: string | null;
  metadata: Metadata;
}

/** Authenticated context: what protected handlers receive. */
export type AuthedContext = CallContext & { auth: AuthClaims; token: string };

interface UnaryDef<Req, Res> {
  path: string;
  requestStream: false;
  responseStream: false;
  requestDeserialize: (b: Buffer) => Req;
  responseSerialize: (v: Res) => Buffer;
  requestSerialize: (v: Req) => Buffer;
  responseDeserialize: (b: Buffer) => Res;
}
interface ServerStreamDef<Req, Res> {
  path: string;
  requestStream: false;
  responseStream: true;
  requestDeserialize: (b: Buffer) => Req;
  responseSerialize: (v: Res) => Buffer;
  requestSerialize: (v: Req) => Buffer;
  responseDeserialize: (b: Buffer) => Res;
}

export type ReqOf<M> = M extends { requestDeserialize: (b: Buffer) => infer R } ? R : never;
export type ResOf<M> = M extends { responseDeserialize: (b: Buffer) => infer R } ? R : never;

/** A server-streaming handler writes with `send`; `signal` aborts when the client goes away. */
export type StreamHandler<Req, Res> = (
  req: Req,
  ctx: CallContext,
  send: (message: Res) => Promise<void>,
  signal: AbortSignal,
) => Promise<void>;

/**
 * A server-streaming call as kit's client makes it: its messages, and two ways to end it before reading to its end
 * (neither resets the stream; see STOP_ON_HALF_CLOSE_KEY and STREAM_END_WAIT_MS).
 */
export interface ServerStream<T> extends AsyncIterable<T> {
  /** Gives the call up before its end: the service is asked to end it (its handler's signal aborts). */
  cancel(): void;
  /** Its final message has been read: the rest is read to the service's own end, without asking it to stop. */
  release(): void;
}

/** The promise-returning implementation of a ts-proto service definition. */
export type Implementation<D> = {
  [K in keyof D]: D[K] extends UnaryDef<infer Req, infer Res>
    ? (req: Req, ctx: CallContext) => Promise<Res>
    : D[K] extends ServerStreamDef<infer Req, infer Res>
      ? StreamHandler<Req, Res>
      : never;
};
