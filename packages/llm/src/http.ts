/**
 * The HTTP transport every provider sends through: undici's `request` API on a keep-alive connection pool per origin
 * (an undici Agent holds one Pool per origin). No WHATWG Request / Response / ReadableStream layer as fetch has
 * (measured at ~0.3-0.4 ms of CPU a call, see bench/llm-http.ts): the answer's body is a Node readable, read as is.
 */
import type { Readable } from 'node:stream';
import type * as Undici from 'undici';

export interface HttpInit {
  method: string;
  headers: Record<string, string>;
  body?: string | Uint8Array;
  /** Aborting it ends the request, or the body being read, and closes the connection. */
  signal?: AbortSignal;
}

export interface HttpReply {
  status: number;
  /** Lower-case names, as undici gives them. */
  headers: Record<string, string | string[] | undefined>;
  /** The body; read to its end the connection goes back to the pool, destroyed (or aborted) it is closed. */
  body: Readable;
}

/**
 * Sends one request: the caller's egress guard (`throughEgress`), or by default {@link sendHttp}. It may throw an
 * `LlmError` to refuse a request; that error is thrown from the call as is and not retried.
 */
export type LlmTransport = (url: string, init: HttpInit) => Promise<HttpReply>;

let pool: Undici.Agent | undefined;
/** undici, loaded by the first provider call (~60 ms of a services process's start otherwise). */
// eslint-disable-next-line @typescript-eslint/no-require-imports -- deliberate lazy load (cached by require)
const undici = () => require('undici') as typeof Undici;

/**
 * The process's provider pool, made on first use, with undici's defaults as global fetch has them: connections kept
 * alive 4 s idle (or what the server's Keep-Alive header says), 300 s header and body timeouts (the calls' own idle
 * timeout, CallControl, is shorter by default).
 */
function providerPool(): Undici.Agent {
  return (pool ??= new (undici().Agent)());
}

/** The default transport: undici's request on the shared keep-alive pool. Redirects are never followed. */
export const sendHttp: LlmTransport = async (url, init) => {
  const res = await undici().request(url, {
    method: init.method as 'POST',
    headers: init.headers,
    body: init.body,
    signal: init.signal,
    dispatcher: providerPool(),
  });
  return { status: res.statusCode, headers: res.headers, body: res.body };
};

/** A header's value (the first, when it came several times), or null: the `get` the error classifier reads. */
export function headerReader(headers: HttpReply['headers']): { get(name: string): string | null } {
  return {
    get(name: string) {
      const value = headers[name.toLowerCase()];
      return value === undefined ? null : Array.isArray(value) ? (value[0] ?? null) : value;
    },
  };
}

/** Reads a body to its end as text (error answers, embeddings). */
export async function readText(body: Readable): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer));
  return Buffer.concat(chunks).toString('utf8');
}
