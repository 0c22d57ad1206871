/**
 * The parts the fake OpenAI and Anthropic servers share: a real HTTP server on loopback, request recording, the
 * behaviour queue, the deterministic echo reply, chunking and paced SSE writing.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface FakeUsage {
  /** The whole prompt, cached part included. */
  inputTokens?: number;
  outputTokens?: number;
  /** The part of the prompt read from the provider's cache (default 0). */
  cachedInputTokens?: number;
}

export interface FakeToolCall {
  /** Default: a deterministic id (`call_fake_1`, `toolu_fake_1`...). */
  id?: string;
  name: string;
  /** An object is sent as its JSON; a string is sent as is (so invalid JSON can be scripted). */
  arguments: Record<string, unknown> | string;
}

/**
 * What the fake does with one request. Scripted behaviours are used in order, one per chat request; with none left,
 * the default (an echo of the last user message) answers.
 */
export type FakeBehaviour =
  /**
   * A text reply split into `chunks` pieces (default: one per word), `delayMs` before each event; `holdEndMs` (OpenAI
   * fake) pauses before the end-of-stream marker (after the usage chunk), so a test can cut a fully answered call.
   */
  | {
      type: 'text';
      text: string;
      chunks?: number;
      delayMs?: number;
      holdEndMs?: number;
      usage?: FakeUsage;
      finishReason?: 'stop' | 'length';
    }
  /** Tool calls (after optional text); each call's arguments JSON split into `argumentChunks` pieces (default 3). */
  | { type: 'tool_calls'; toolCalls: FakeToolCall[]; text?: string; argumentChunks?: number; delayMs?: number; usage?: FakeUsage }
  /**
   * An HTTP error in the provider's own error format, for this request and the next `times - 1` (default 1).
   * `retryAfter` sets the `retry-after` header (seconds); a 429 gets `retry-after: 0` unless it is `null`.
   */
  | { type: 'error'; status: number; times?: number; retryAfter?: number | string | null; message?: string; code?: string }
  /**
   * Starts a normal text reply, writes `afterChunks` SSE events, then cuts: `destroy` (default) resets the socket,
   * `end` ends the HTTP response cleanly but without the end-of-stream marker.
   */
  | { type: 'cut'; afterChunks: number; mode?: 'destroy' | 'end'; text?: string; chunks?: number }
  /** Never answers: `headers` sends nothing; `body` (default) sends 200 and the SSE headers, then nothing. Until the client goes. */
  | { type: 'hang'; stage?: 'headers' | 'body' }
  /** Sends exactly this body (for protocol edge cases). */
  | { type: 'raw'; status?: number; headers?: Record<string, string>; body: string };

export interface FakeMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  text: string;
  toolCalls?: Array<{ id: string; name: string; arguments: string }>;
  toolCallId?: string;
}

/** A provider-neutral view of a chat request, the same for both fakes. */
export interface FakeConversation {
  model: string;
  stream: boolean;
  /** System prompt (OpenAI: system messages joined; Anthropic: the `system` parameter). */
  system: string;
  /** Messages other than the system prompt, in order; tool results are `tool` messages. */
  messages: FakeMessage[];
  /** Names of the tools offered. */
  tools: string[];
}

export interface FakeRequest {
  method: string;
  /** Path with query, as received (`/v1/chat/completions`). */
  path: string;
  headers: http.IncomingHttpHeaders;
  /** Parsed JSON body, or the raw text when it is not JSON, or `undefined` when empty. */
  body: unknown;
  /** Set for chat requests that passed validation. */
  conversation?: FakeConversation;
  /** True when the client closed the connection before the response was complete. */
  aborted: boolean;
}

export type FakeScriptItem = FakeBehaviour | ((request: FakeRequest) => FakeBehaviour);

export interface FakeProviderServer {
  /** Base URL to give the client (OpenAI: with the version path; Anthropic: the root). */
  url: string;
  /** Every request received, in order, including rejected ones. */
  requests: FakeRequest[];
  /** Queues behaviours (or functions choosing one from the request) for the next chat requests. */
  script(...items: FakeScriptItem[]): void;
  /** Replaces the default echo for unscripted requests (`undefined` restores the echo). */
  setDefault(handler: ((request: FakeRequest) => FakeBehaviour) | undefined): void;
  /** Scripted behaviours not yet used (an error with `times: 3` counts as 3). */
  pending(): number;
  /** Forgets the recorded requests and the queued behaviours. */
  reset(): void;
  /** Stops the server, cutting open connections (hanging replies included). */
  close(): Promise<void>;
}

export interface FakeServerOptions {
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 0 (any free port). */
  port?: number;
  /** When set, requests must carry this key (`Authorization: Bearer` / `x-api-key`), else 401 as the real API does. */
  apiKey?: string;
}

/** The fakes' embedding of a text: deterministic, `dimensions` long (default 8), so tests can predict it. */
export function fakeEmbedding(text: string, dimensions = 8): number[] {
  return Array.from({ length: dimensions }, (_, d) => Number(((((text.length + 1) * (d + 3)) % 97) / 97).toFixed(6)));
}

/** The deterministic default reply to a user message. */
export function echoText(userText: string): string {
  return `Echo: ${userText}`;
}

/** The default reply to a conversation: {@link echoText} of its last user message. */
export function echoReply(conversation: FakeConversation): FakeBehaviour {
  const lastUser = [...conversation.messages].reverse().find((m) => m.role === 'user');
  return { type: 'text', text: echoText(lastUser?.text ?? '') };
}

/** The fakes' token count: one token per 4 characters, rounded up. Deterministic, so tests can predict it. */
export function estimateTokens(text: string): number {
  return Math.ceil(text.length / 4);
}

export function conversationTokens(conversation: FakeConversation): number {
  let total = estimateTokens(conversation.system);
  for (const m of conversation.messages) {
    total += estimateTokens(m.text);
    for (const call of m.toolCalls ?? []) total += estimateTokens(call.name) + estimateTokens(call.arguments);
  }
  return Math.max(1, total);
}

/**
 * Splits text into `n` pieces of near-equal length (by code point), or, without `n`, into words with their
 * trailing spaces. Joining the pieces gives the text back.
 */
export function splitText(text: string, n?: number): string[] {
  if (text === '') return [];
  if (n === undefined) return text.match(/\S+\s*|\s+/g) ?? [text];
  const points = Array.from(text);
  const count = Math.max(1, Math.min(Math.floor(n), points.length));
  const pieces: string[] = [];
  for (let i = 0; i < count; i++) {
    pieces.push(points.slice(Math.floor((i * points.length) / count), Math.floor(((i + 1) * points.length) / count)).join(''));
  }
  return pieces;
}

/** A reply to send, the same for every fake: its text in pieces, its tool calls with argument pieces, its counts. */
export interface ReplyPlan {
  text: string;
  textPieces: string[];
  toolCalls: Array<{ id: string; name: string; pieces: string[]; json: string; args: unknown }>;
  finishReason: 'stop' | 'length' | 'tool_calls';
  usage: { input: number; output: number; cached: number };
}

/** Plans the reply of a `text`, `tool_calls` or `cut` behaviour (ids `${idPrefix}N`). */
export function planReply(ctx: FakeContext, conversation: FakeConversation, behaviour: FakeBehaviour, idPrefix = 'call_fake_'): ReplyPlan {
  const usageOf = (text: string, extra: string, given?: FakeUsage) => ({
    input: given?.inputTokens ?? conversationTokens(conversation),
    output: given?.outputTokens ?? Math.max(1, estimateTokens(text) + estimateTokens(extra)),
    cached: given?.cachedInputTokens ?? 0,
  });
  if (behaviour.type === 'tool_calls') {
    const text = behaviour.text ?? '';
    const toolCalls = behaviour.toolCalls.map((call) => {
      const json = typeof call.arguments === 'string' ? call.arguments : JSON.stringify(call.arguments);
      return {
        id: call.id ?? `${idPrefix}${ctx.serial()}`,
        name: call.name,
        json,
        args: call.arguments,
        pieces: splitText(json, behaviour.argumentChunks ?? 3),
      };
    });
    return {
      text,
      textPieces: splitText(text),
      toolCalls,
      finishReason: 'tool_calls',
      usage: usageOf(text, toolCalls.map((c) => c.name + c.json).join(''), behaviour.usage),
    };
  }
  if (behaviour.type === 'text') {
    return {
      text: behaviour.text,
      textPieces: splitText(behaviour.text, behaviour.chunks),
      toolCalls: [],
      finishReason: behaviour.finishReason ?? 'stop',
      usage: usageOf(behaviour.text, '', behaviour.usage),
    };
  }
  // cut: a normal text reply that will not be finished.
  const text =
    behaviour.type === 'cut' && behaviour.text !== undefined ? behaviour.text : 'This reply will be cut off before it is complete.';
  const chunks = behaviour.type === 'cut' ? behaviour.chunks : undefined;
  return { text, textPieces: splitText(text, chunks), toolCalls: [], finishReason: 'stop', usage: usageOf(text, '') };
}

/** Written in a reply's text, replaced by the wall clock (epoch ms, 3 decimals) as the event is written: benches use it. */
export const NOW_MARK = '{{now}}';

function stampNow(event: string | Uint8Array): string | Uint8Array {
  return typeof event === 'string' && event.includes(NOW_MARK)
    ? event.replaceAll(NOW_MARK, (performance.timeOrigin + performance.now()).toFixed(3))
    : event;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Writes one chunk and waits until it is handed to the socket; false when the client is gone. */
export function writeFlushed(res: http.ServerResponse, data: string | Uint8Array): Promise<boolean> {
  if (res.destroyed || res.writableEnded) return Promise.resolve(false);
  return new Promise((resolve) => {
    res.write(data, (err) => resolve(!err));
  });
}

export function waitForClose(res: http.ServerResponse): Promise<void> {
  if (res.destroyed || res.closed) return Promise.resolve();
  return new Promise((resolve) => res.once('close', () => resolve()));
}

export function sendJson(res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

export function startSse(res: http.ServerResponse, headers: Record<string, string>): void {
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
    ...headers,
  });
  res.flushHeaders();
}

/**
 * Writes SSE events (or binary event-stream frames) with an optional pause before each. With `cutAfter`, stops after
 * that many events and cuts the connection (`destroy`) or ends the response without the rest (`end`).
 */
export async function writeEvents(
  res: http.ServerResponse,
  events: Array<string | Uint8Array>,
  options: { delayMs?: number; cutAfter?: number; cutMode?: 'destroy' | 'end' } = {},
): Promise<void> {
  const limit = options.cutAfter === undefined ? events.length : Math.min(options.cutAfter, events.length);
  for (let i = 0; i < limit; i++) {
    if (options.delayMs) await sleep(options.delayMs);
    if (!(await writeFlushed(res, stampNow(events[i])))) return;
  }
  if (options.cutAfter === undefined) {
    res.end();
  } else if (options.cutMode === 'end') {
    res.end();
  } else {
    res.socket?.destroy();
  }
}

export interface FakeContext {
  req: http.IncomingMessage;
  res: http.ServerResponse;
  record: FakeRequest;
  /** Takes the next behaviour for this chat request (scripted, else the default). */
  next(): FakeBehaviour;
  /**
   * For requests other than chat (embeddings): takes the next scripted behaviour only when it is an `error` or a
   * `hang`, so chat scripts are not consumed by them.
   */
  nextFailure(): Extract<FakeBehaviour, { type: 'error' | 'hang' }> | undefined;
  /** A number unique within this server, for ids. */
  serial(): number;
}

/** Starts the HTTP server; `handle` answers each request after its body has been read and recorded. */
export async function startFakeServer(
  options: FakeServerOptions,
  urlFor: (origin: string) => string,
  handle: (ctx: FakeContext) => Promise<void>,
): Promise<FakeProviderServer> {
  const requests: FakeRequest[] = [];
  let queue: FakeScriptItem[] = [];
  let fallback: ((request: FakeRequest) => FakeBehaviour) | undefined;
  let counter = 0;

  const takeNext = (record: FakeRequest): FakeBehaviour => {
    const head = queue[0];
    if (head === undefined) {
      if (fallback) return fallback(record);
      return record.conversation ? echoReply(record.conversation) : { type: 'text', text: echoText('') };
    }
    if (typeof head === 'function') {
      queue.shift();
      return head(record);
    }
    if (head.type === 'error' && (head.times ?? 1) > 1) {
      queue[0] = { ...head, times: (head.times ?? 1) - 1 };
      return head;
    }
    queue.shift();
    return head;
  };

  const server = http.createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (part: Buffer) => parts.push(part));
    req.on('end', () => {
      const raw = Buffer.concat(parts).toString('utf8');
      let body: unknown = undefined;
      if (raw !== '') {
        try {
          body = JSON.parse(raw);
        } catch {
          body = raw;
        }
      }
      const record: FakeRequest = { method: req.method ?? 'GET', path: req.url ?? '/', headers: req.headers, body, aborted: false };
      requests.push(record);
      res.on('close', () => {
        if (!res.writableFinished) record.aborted = true;
      });
      const nextFailure = () => {
        const head = queue[0];
        if (head === undefined || typeof head === 'function' || (head.type !== 'error' && head.type !== 'hang')) return undefined;
        return takeNext(record) as Extract<FakeBehaviour, { type: 'error' | 'hang' }>;
      };
      const ctx: FakeContext = { req, res, record, next: () => takeNext(record), nextFailure, serial: () => ++counter };
      handle(ctx).catch(() => {
        if (!res.headersSent) sendJson(res, 500, { error: { message: 'fake server failure', type: 'server_error' } });
        else res.destroy();
      });
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;

  return {
    url: urlFor(`http://${host}:${address.port}`),
    requests,
    script: (...items) => {
      queue.push(...items);
    },
    setDefault: (handler) => {
      fallback = handler;
    },
    pending: () => queue.reduce((n, item) => n + (typeof item !== 'function' && item.type === 'error' ? (item.times ?? 1) : 1), 0),
    reset: () => {
      requests.length = 0;
      queue = [];
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** `retry-after` for an error behaviour: a 429 defaults to 0 seconds. */
export function retryAfterHeader(behaviour: Extract<FakeBehaviour, { type: 'error' }>): Record<string, string> {
  if (behaviour.retryAfter === null) return {};
  if (behaviour.retryAfter !== undefined) return { 'retry-after': String(behaviour.retryAfter) };
  return behaviour.status === 429 ? { 'retry-after': '0' } : {};
}

/** Masks a key the way providers print one in a 401 message (`sk-ab***...wxyz`). */
export function maskKey(key: string): string {
  if (key.length <= 8) return '*'.repeat(key.length);
  return `${key.slice(0, 5)}${'*'.repeat(Math.min(20, key.length - 9))}${key.slice(-4)}`;
}
