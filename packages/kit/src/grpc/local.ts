/**
 * Unary calls to a server of this same process, made without the loopback socket (the combined layout runs every
 * service in one process: chat's Reserve to billing, its identity look-ups). A kit server registers its address once
 * it listens and removes it when it starts to stop; a kit client finds it by the address it was given, call by call.
 * Everything a caller can see stays as over gRPC: the request and the answer cross as protobuf bytes (encoded and
 * decoded by the same definitions, so neither side shares an object with the other, and the receive size bound
 * holds), the metadata is the one the client would send, the server's wrapper runs the same context, handler and error
 * mapping, the client maps the status the same way, and the deadline answers DEADLINE_EXCEEDED. What is saved is the
 * HTTP/2 framing, two socket writes and two turns of the event loop a side (about 1 ms a call on this machine).
 * Only a plain `host:port` address matches (a list or a DNS name for several replicas keeps spreading over them), and
 * nothing is local while traces are exported (the gRPC spans come from the transport).
 */
import type * as grpc from '@grpc/grpc-js';
import { telemetryEnabled } from '../telemetry';

/** What a local server answers: its message, or the status the gRPC transport would carry. */
export type LocalAnswer = { ok: true; value: unknown } | { ok: false; status: Partial<grpc.StatusObject> };

export interface LocalMethod {
  requestDeserialize(bytes: Buffer): unknown;
  responseSerialize(value: unknown): Buffer;
  /** The server's wrapped handler, given what grpc-js would give it. */
  call(request: unknown, metadata: grpc.Metadata): Promise<LocalAnswer>;
}

export interface LocalServer {
  /** The unary methods it serves, by path. */
  readonly methods: ReadonlyMap<string, LocalMethod>;
  /** Calls answered in-process and not finished yet (a graceful stop waits for them as for its gRPC calls). */
  track<T>(work: Promise<T>): Promise<T>;
}

const servers = new Map<string, LocalServer>();
const enabled = !telemetryEnabled;

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '0.0.0.0', '::', '[::]', '::1', '[::1]']);

/** The addresses a server bound to `host:port` is reached at from this process. */
function addressesOf(host: string, port: number): string[] {
  if (!LOOPBACK.has(host)) return [`${host}:${port}`];
  return [`127.0.0.1:${port}`, `localhost:${port}`, `0.0.0.0:${port}`, `[::1]:${port}`, `${host}:${port}`];
}

/** Registers a listening server; returns its removal. */
export function registerLocal(host: string, port: number, server: LocalServer): () => void {
  if (!enabled) return () => undefined;
  const keys = [...new Set(addressesOf(host, port))];
  for (const k of keys) servers.set(k, server);
  return () => {
    for (const k of keys) if (servers.get(k) === server) servers.delete(k);
  };
}

/** The server of this process that `address` names and that serves `path`, if any. */
export function localMethod(address: string, path: string): { server: LocalServer; method: LocalMethod } | undefined {
  if (servers.size === 0) return undefined;
  const server = servers.get(address);
  const method = server?.methods.get(path);
  return method ? { server: server!, method } : undefined;
}
