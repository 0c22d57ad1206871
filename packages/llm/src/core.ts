/**
 * What the adapters share: settings checks, secret redaction, the one POST-and-read-the-failure shell (postJson) on
 * the undici transport (http.ts), the retry loop, the idle timeout, cancellation and the SSE body reader. The
 * adapters only build requests, read their provider's error body and translate wire events.
 */
import { Readable } from 'node:stream';
import {
  LlmError,
  type LlmEmbedRequest,
  type LlmErrorKind,
  type LlmEvent,
  type LlmMessage,
  type LlmProviderKind,
  type LlmSettings,
  type LlmToolCall,
  type LlmUsageEvent,
} from './types';
import { headerReader, readText, sendHttp, type HttpReply, type LlmTransport } from './http';
import { decodeSse, type SseMessage } from './sse';

export const DEFAULT_TIMEOUT_MS = 60_000;
export const DEFAULT_MAX_RETRIES = 2;
/** A `retry-after` longer than this is not waited for: the error is thrown with `retryAfterMs` set. */
export const MAX_RETRY_AFTER_MS = 60_000;
const BACKOFF_BASE_MS = 500;
const BACKOFF_MAX_MS = 8_000;
const MAX_PROVIDER_MESSAGE = 300;

export const PROVIDER_LABEL: Record<LlmProviderKind, string> = {
  openai: 'OpenAI',
  anthropic: 'Anthropic',
  'openai-compatible': 'the OpenAI-compatible server',
  'azure-openai': 'Azure OpenAI',
  gemini: 'Gemini',
  bedrock: 'Bedrock',
};

export interface ResolvedSettings {
  provider: LlmProviderKind;
  apiKey: string | undefined;
  baseUrl: string;
  model: string | undefined;
  temperature: number | undefined;
  maxTokens: number | undefined;
  timeoutMs: number;
  maxRetries: number;
  transport: LlmTransport;
}

function configError(message: string): LlmError {
  return new LlmError('bad_request', message);
}

/** Checks settings once, at construction; a bad value throws an `LlmError` of kind `bad_request`. */
export function resolveSettings(settings: LlmSettings, defaultBaseUrl: string | undefined): ResolvedSettings {
  const apiKey = settings.apiKey === '' ? undefined : settings.apiKey;
  const rawBase = settings.baseUrl === '' || settings.baseUrl === undefined ? defaultBaseUrl : settings.baseUrl;
  if (rawBase === undefined) throw configError(`the ${settings.provider} provider needs a baseUrl`);
  let url: URL;
  try {
    url = new URL(rawBase);
  } catch {
    throw configError('baseUrl must be an absolute http(s) URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw configError('baseUrl must use http or https');
  if (url.username || url.password) throw configError('baseUrl must not contain credentials');
  const timeoutMs = settings.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) throw configError('timeoutMs must be a positive number');
  const maxRetries = settings.maxRetries ?? DEFAULT_MAX_RETRIES;
  if (!Number.isInteger(maxRetries) || maxRetries < 0) throw configError('maxRetries must be a non-negative integer');
  return {
    provider: settings.provider,
    apiKey,
    baseUrl: rawBase.replace(/\/+$/, ''),
    model: settings.model || undefined,
    temperature: settings.temperature,
    maxTokens: settings.maxTokens,
    timeoutMs,
    maxRetries,
    transport: settings.transport ?? sendHttp,
  };
}

/** Removes secrets from text meant for an error message: the key itself, key-shaped tokens, bearer tokens. */
export function redact(text: string, secrets: ReadonlyArray<string | undefined>): string {
  let out = text;
  for (const secret of secrets) {
    if (secret && secret.length >= 4) out = out.split(secret).join('[redacted]');
  }
  return out.replace(/\bBearer\s+[^\s"',]+/gi, 'Bearer [redacted]').replace(/\b(sk|pk|rk)-[A-Za-z0-9_\-*.]{4,}/g, '[redacted]');
}

export function safeProviderMessage(text: unknown, secrets: ReadonlyArray<string | undefined>): string | undefined {
  if (typeof text !== 'string' || text.trim() === '') return undefined;
  const clean = redact(text.trim(), secrets);
  return clean.length > MAX_PROVIDER_MESSAGE ? `${clean.slice(0, MAX_PROVIDER_MESSAGE)}...` : clean;
}

/** The kind an HTTP status maps to. */
export function kindForStatus(status: number): LlmErrorKind {
  if (status === 401 || status === 403) return 'auth';
  if (status === 429) return 'rate_limited';
  if (status === 408) return 'timeout';
  if (status === 409 || status >= 500) return 'unavailable';
  return 'bad_request';
}

/** Reads `retry-after-ms` (milliseconds) or `retry-after` (seconds or an HTTP date). */
export function retryAfterMs(headers: { get(name: string): string | null } | undefined, now = Date.now()): number | undefined {
  if (!headers) return undefined;
  const ms = headers.get('retry-after-ms');
  if (ms !== null && ms.trim() !== '') {
    const value = Number(ms);
    if (Number.isFinite(value) && value >= 0) return value;
  }
  const after = headers.get('retry-after');
  if (after === null || after.trim() === '') return undefined;
  const seconds = Number(after);
  if (Number.isFinite(seconds)) return seconds >= 0 ? seconds * 1000 : undefined;
  const date = Date.parse(after);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, date - now);
}

export interface HttpFailure {
  status: number;
  headers?: { get(name: string): string | null };
  /** The provider's own error message (will be redacted and shortened). */
  providerMessage?: unknown;
  /** The provider's error type / code. */
  code?: string;
}

/** A provider's non-2xx answer, thrown by a request sent without an SDK for its classifier (classifyHttpFailure). */
export class ProviderHttpError extends Error {
  constructor(readonly failure: HttpFailure) {
    super(`HTTP ${failure.status}`);
  }
}

/** An LLM error plus whether the retry loop may try again. */
export interface Classified {
  error: LlmError;
  retry: boolean;
}

export function classifyHttpFailure(
  provider: LlmProviderKind,
  failure: HttpFailure,
  secrets: ReadonlyArray<string | undefined>,
): Classified {
  const { status, headers } = failure;
  const kind = kindForStatus(status);
  const label = PROVIDER_LABEL[provider];
  const code = typeof failure.code === 'string' && failure.code !== '' ? redact(failure.code, secrets) : undefined;
  const details = {
    status,
    provider,
    code,
    retryAfterMs: retryAfterMs(headers),
    requestId: headers?.get('x-request-id') ?? headers?.get('request-id') ?? undefined,
  };
  let message: string;
  if (status === 401) {
    // Providers echo (part of) the key they were given in 401 messages: say only what happened.
    message = `${label} rejected the API key (HTTP 401${code ? `, ${code}` : ''})`;
  } else {
    const said = safeProviderMessage(failure.providerMessage, secrets);
    const what =
      kind === 'auth'
        ? 'denied the request'
        : kind === 'rate_limited'
          ? 'rate limited the request'
          : kind === 'unavailable' || kind === 'timeout'
            ? 'failed to answer'
            : 'refused the request';
    message = `${label} ${what} (HTTP ${status}${code ? `, ${code}` : ''})${said ? `: ${said}` : ''}`;
  }
  const shouldRetryHeader = headers?.get('x-should-retry');
  const retry =
    shouldRetryHeader === 'true'
      ? true
      : shouldRetryHeader === 'false'
        ? false
        : kind === 'rate_limited' || kind === 'unavailable' || status === 408;
  return { error: new LlmError(kind, message, details), retry };
}

/** Reads a provider's error answer (its parsed JSON body, or undefined when it was not JSON) into a failure. */
export type ReadFailure = (status: number, body: unknown, headers: NonNullable<HttpFailure['headers']>) => HttpFailure;

/** OpenAI's error body, which Azure and most compatible servers send too: `{"error": {"message", "code" | "type"}}`. */
export const readOpenAIFailure: ReadFailure = (status, body, headers) => {
  const raw = (body as { error?: unknown } | undefined)?.error;
  const error = (raw && typeof raw === 'object' ? raw : {}) as { message?: unknown; code?: unknown; type?: unknown };
  const code = typeof error.code === 'string' ? error.code : typeof error.type === 'string' ? error.type : undefined;
  return { status, headers, providerMessage: error.message, code };
};

const USER_AGENT = 'svc-llm';

export interface PostJson {
  settings: ResolvedSettings;
  /** The whole URL (base, path and query). */
  url: string;
  /** The provider's own headers (authentication, version); content-type and accept are added. */
  headers: Record<string, string>;
  body: unknown;
  signal: AbortSignal;
  /** Reads the provider's error body; default {@link readOpenAIFailure}. */
  readFailure?: ReadFailure;
}

/**
 * The one POST every HTTP provider sends: JSON out through the settings' transport (undici, or the caller's egress
 * guard); a 2xx reply comes back with its body unread (an SSE stream, or JSON for {@link readJson}); any other status
 * is thrown as a {@link ProviderHttpError} with the provider's error body read (for the status mapping, Retry-After
 * and the message). Cancellation is the signal's: aborting it ends the request or the body being read.
 */
export async function postJson(post: PostJson): Promise<HttpReply> {
  const reply = await post.settings.transport(post.url, {
    method: 'POST',
    // A user-agent as fetch and the SDKs sent one (some proxies refuse requests without).
    headers: { 'content-type': 'application/json', accept: 'application/json', 'user-agent': USER_AGENT, ...post.headers },
    body: JSON.stringify(post.body),
    signal: post.signal,
  });
  if (reply.status >= 200 && reply.status < 300) return reply;
  let body: unknown;
  try {
    body = JSON.parse(await readText(reply.body));
  } catch {
    // Not JSON (a proxy's page), or cut: the status says enough.
    if (post.signal.aborted) throw post.signal.reason;
  }
  throw new ProviderHttpError((post.readFailure ?? readOpenAIFailure)(reply.status, body, headerReader(reply.headers)));
}

/** A 2xx reply's JSON body (embeddings), or a protocol error saying what was expected. */
export async function readJson(provider: LlmProviderKind, reply: HttpReply, what: string, signal: AbortSignal): Promise<unknown> {
  const text = await readText(reply.body);
  try {
    return JSON.parse(text) as unknown;
  } catch {
    if (signal.aborted) throw signal.reason;
    throw new LlmError('protocol', `${PROVIDER_LABEL[provider]} sent ${what} that is not JSON`, { provider });
  }
}

/** Maps an error object's identity to a sanitized `{name, code}`: never its message. */
export function sanitizedCause(err: unknown): { name?: string; code?: string } | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const cause: { name?: string; code?: string } = {};
  const name = (err as { name?: unknown }).name;
  if (typeof name === 'string') cause.name = name;
  let inner: unknown = err;
  for (let depth = 0; depth < 4 && typeof inner === 'object' && inner !== null; depth++) {
    const code = (inner as { code?: unknown }).code;
    if (typeof code === 'string' && /^[A-Z0-9_]+$/.test(code)) {
      cause.code = code;
      break;
    }
    inner = (inner as { cause?: unknown }).cause;
  }
  return cause.name || cause.code ? cause : undefined;
}

/**
 * Errors thrown by the transport under an SDK (Bedrock's) are wrapped on their way through it so that nothing the
 * SDK does to them (retry heuristics that read the message, re-wrapping) can lose or misread them;
 * {@link unwrapTransportFailure} gets the original back.
 */
const ORIGINAL = Symbol('llm.transportFailure');
class TransportFailure extends Error {
  override readonly name = 'TransportFailure';
  readonly [ORIGINAL]: unknown;
  constructor(original: unknown) {
    super('the request failed');
    this[ORIGINAL] = original;
  }
}

export function guardedTransport(inner: LlmTransport): LlmTransport {
  return async (url, init) => {
    try {
      return await inner(url, init);
    } catch (err) {
      // Aborts must keep their identity: the SDK and the runner recognise them by name.
      if (typeof err === 'object' && err !== null && (err as { name?: unknown }).name === 'AbortError') throw err;
      throw new TransportFailure(err);
    }
  };
}

/** Finds the error the transport threw, anywhere in an SDK error's cause chain. */
export function unwrapTransportFailure(err: unknown): { found: boolean; original: unknown } {
  let current: unknown = err;
  for (let depth = 0; depth < 5 && typeof current === 'object' && current !== null; depth++) {
    if (current instanceof TransportFailure) return { found: true, original: current[ORIGINAL] };
    current = (current as { cause?: unknown }).cause;
  }
  return { found: false, original: undefined };
}

/** A connection-level failure (refused, reset, DNS, TLS): retryable, kind `unavailable`. */
export function connectionFailure(provider: LlmProviderKind, err: unknown): Classified {
  const { found, original } = unwrapTransportFailure(err);
  if (found && original instanceof LlmError) return { error: original, retry: false };
  const cause = sanitizedCause(found ? original : err);
  const detail = cause?.code ? ` (${cause.code})` : '';
  return {
    error: new LlmError('unavailable', `could not reach ${PROVIDER_LABEL[provider]}${detail}`, { provider, cause }),
    retry: true,
  };
}

export function backoffMs(attempt: number, random = Math.random): number {
  const base = Math.min(BACKOFF_BASE_MS * 2 ** attempt, BACKOFF_MAX_MS);
  return base * (1 - random() * 0.25);
}

function abortError(kind: 'cancelled' | 'timeout', provider: LlmProviderKind, timeoutMs: number): LlmError {
  return kind === 'cancelled'
    ? new LlmError('cancelled', 'the request was cancelled', { provider })
    : new LlmError('timeout', `${PROVIDER_LABEL[provider]} sent nothing for ${timeoutMs} ms`, { provider });
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * One call's cancellation, idle timeout and retries: the caller's signal and the idle timer abort one controller;
 * `open` retries before the reply starts; `read` arms the idle timer around each wait on the network.
 */
export class CallControl {
  readonly controller = new AbortController();
  private stopped: 'cancelled' | 'timeout' | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private readonly onAbort = () => {
    this.stopped ??= 'cancelled';
    this.controller.abort();
  };

  constructor(
    private readonly settings: ResolvedSettings,
    private readonly signal: AbortSignal | undefined,
  ) {
    if (signal?.aborted) throw abortError('cancelled', settings.provider, settings.timeoutMs);
    signal?.addEventListener('abort', this.onAbort, { once: true });
  }

  /** The error for a call we stopped ourselves (the caller's signal or the idle timer), if we did. */
  get stoppedError(): LlmError | undefined {
    return this.stopped ? abortError(this.stopped, this.settings.provider, this.settings.timeoutMs) : undefined;
  }

  arm(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.stopped ??= 'timeout';
      this.controller.abort();
    }, this.settings.timeoutMs);
  }

  disarm(): void {
    clearTimeout(this.timer);
  }

  /** Sends with retries (429, 5xx, lost connections; backoff or retry-after), each attempt bounded by the idle timeout. */
  async open<R>(open: (signal: AbortSignal) => Promise<R>, classify: (err: unknown) => Classified): Promise<R> {
    const { provider, timeoutMs, maxRetries } = this.settings;
    for (let attempt = 0; ; attempt++) {
      this.arm();
      try {
        return await open(this.controller.signal);
      } catch (err) {
        if (this.stopped) throw abortError(this.stopped, provider, timeoutMs);
        const { error, retry } = classify(err);
        if (!retry || attempt >= maxRetries) throw error;
        const delay = error.retryAfterMs ?? backoffMs(attempt);
        if (delay > MAX_RETRY_AFTER_MS) throw error;
        this.disarm();
        try {
          await sleep(delay, this.controller.signal);
        } catch {
          throw abortError(this.stopped ?? 'cancelled', provider, timeoutMs);
        }
      } finally {
        this.disarm();
      }
    }
  }

  /**
   * Reads a source with the idle timeout armed around each wait. A failure while reading is our own stop when we
   * stopped it, else what `failed` makes of it (by default: the connection was lost mid-reply).
   */
  async *read<T>(source: AsyncIterable<T>, failed: (err: unknown) => LlmError = (err) => this.lostMidReply(err)): AsyncGenerator<T> {
    const body = source instanceof Readable ? source : null;
    const iterator: AsyncIterator<T> = body ? body.iterator({ destroyOnReturn: false }) : source[Symbol.asyncIterator]();
    try {
      for (;;) {
        let result: IteratorResult<T>;
        this.arm();
        try {
          result = await iterator.next();
        } catch (err) {
          if (this.stopped) throw abortError(this.stopped, this.settings.provider, this.settings.timeoutMs);
          throw failed(err);
        } finally {
          this.disarm();
        }
        if (result.done) return;
        yield result.value;
      }
    } finally {
      // Frees the connection when the consumer stopped early or the stream failed; a no-op after a complete read.
      void Promise.resolve(iterator.return?.()).catch(() => undefined);
      if (body) settleBody(body);
    }
  }

  lostMidReply(err: unknown): LlmError {
    const { provider } = this.settings;
    if (err instanceof LlmError) return err;
    return new LlmError('unavailable', `the connection to ${PROVIDER_LABEL[provider]} closed before the reply finished`, {
      provider,
      cause: sanitizedCause(err),
    });
  }

  /**
   * Ends the call: aborts what may still be in flight (a retry's wait, a request or a body nobody reads any more).
   * `complete`: the answer was read to its end, nothing is in flight, and aborting would only build an error per
   * listener (the SDK's controller, fetch's) for nobody.
   */
  dispose(complete = false): void {
    this.disarm();
    this.signal?.removeEventListener('abort', this.onAbort);
    if (!complete) this.controller.abort();
  }
}

/**
 * A provider's body its reader stopped reading. A translator stops at the stream's end marker (`[DONE]`), usually
 * with the body's end already received but not yet read: that body is read out, and its connection was already back
 * in the pool. Destroying it instead would build two errors with stack traces (Node's AbortError, undici's
 * RequestAbortedError; ~55 µs a call with source maps on) for nobody. A body still arriving (a consumer that
 * stopped mid-reply) is destroyed, which aborts its request and closes the connection.
 */
function settleBody(body: Readable): void {
  if (body.destroyed || body.readableEnded) return;
  // `ended`: the stream's end was pushed (the whole body arrived), only its reading is left. No public getter says so.
  const received = (body as Readable & { _readableState?: { ended?: boolean } })._readableState?.ended === true;
  if (received) body.resume();
  else body.destroy();
}

export interface RunStreamOptions {
  settings: ResolvedSettings;
  signal: AbortSignal | undefined;
  /** Sends the request ({@link postJson}) and resolves with the streaming reply once its status is 2xx. */
  open: (signal: AbortSignal) => Promise<HttpReply>;
  /** Turns anything `open` threw (that was not our own abort) into an LlmError and a retry decision. */
  classify: (err: unknown) => Classified;
  /** Translates the SSE messages into port events. Must throw when the stream ends without its end marker. */
  translate: (messages: AsyncIterable<SseMessage>) => AsyncGenerator<LlmEvent>;
}

/**
 * Runs one streamed call: retries before the reply starts, an idle timeout while waiting on the network, prompt
 * cancellation (the abort ends undici's request and closes the socket), and an SSE reader on the Node body that
 * reports a connection lost mid-stream as an error.
 */
export async function* runStream(options: RunStreamOptions): AsyncGenerator<LlmEvent> {
  yield* runEventStream({
    ...options,
    events: (reply, control) => decodeSse(control.read<Uint8Array>(reply.body)),
  });
}

export interface RunEventStreamOptions<R, E> {
  settings: ResolvedSettings;
  signal: AbortSignal | undefined;
  /** Sends the request and resolves once the provider accepted it (2xx). */
  open: (signal: AbortSignal) => Promise<R>;
  classify: (err: unknown) => Classified;
  /** The response's events, read through `control.read` (so the idle timeout and cancellation apply). */
  events: (response: R, control: CallControl) => AsyncIterable<E>;
  /** Translates them into port events. Must throw when the stream ends without its end marker. */
  translate: (events: AsyncIterable<E>) => AsyncGenerator<LlmEvent>;
}

/** {@link runStream} for any kind of response: an SSE body, an SDK's decoded event stream. */
export async function* runEventStream<R, E>(options: RunEventStreamOptions<R, E>): AsyncGenerator<LlmEvent> {
  const control = new CallControl(options.settings, options.signal);
  let complete = false;
  try {
    const response = await control.open(options.open, options.classify);
    yield* options.translate(options.events(response, control));
    complete = true;
  } finally {
    control.dispose(complete);
  }
}

/** One call that is not streamed (embeddings): retries, the timeout as a bound on the whole answer, cancellation. */
export async function runRequest<T>(
  settings: ResolvedSettings,
  signal: AbortSignal | undefined,
  send: (signal: AbortSignal) => Promise<T>,
  classify: (err: unknown) => Classified,
): Promise<T> {
  const control = new CallControl(settings, signal);
  try {
    return await control.open(send, classify);
  } finally {
    control.dispose();
  }
}

/** Parses one SSE `data` payload as JSON, or throws a protocol error. */
export function parseEventData(provider: LlmProviderKind, data: string): any {
  try {
    return JSON.parse(data);
  } catch {
    throw new LlmError('protocol', `${PROVIDER_LABEL[provider]} sent an event that is not JSON`, { provider });
  }
}

/** Parses a tool call's accumulated arguments: empty means `{}`; anything but a JSON object is a protocol error. */
export function parseToolArguments(provider: LlmProviderKind, name: string, json: string): Record<string, unknown> {
  if (json.trim() === '') return {};
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch {
    throw new LlmError('protocol', `the arguments of tool call "${name}" are not valid JSON`, { provider });
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new LlmError('protocol', `the arguments of tool call "${name}" are not a JSON object`, { provider });
  }
  return value as Record<string, unknown>;
}

/**
 * A usage event from a provider's counts; `cachedInputTokens` only when the provider reported some, `model` (the model
 * that answered) only when it named one.
 */
export function usageEvent(
  input: number | null | undefined,
  output: number | null | undefined,
  cached?: number | null,
  model?: string | null,
): LlmUsageEvent {
  const event: LlmUsageEvent = { type: 'usage', inputTokens: input ?? 0, outputTokens: output ?? 0 };
  if (typeof cached === 'number' && cached > 0) event.cachedInputTokens = cached;
  if (typeof model === 'string' && model) event.model = model;
  return event;
}

const isTokenArray = (i: unknown): i is number[] =>
  Array.isArray(i) && i.length > 0 && i.every((t) => Number.isInteger(t) && (t as number) >= 0);

/**
 * Checks an embedding request: its model (or the settings'), and a non-empty list of strings or of token arrays
 * (non-empty lists of token ids).
 */
export function embedInputs(settings: ResolvedSettings, request: LlmEmbedRequest): { model: string; input: string[] | number[][] } {
  const provider = settings.provider;
  const model = request.model || settings.model;
  if (!model) throw new LlmError('bad_request', 'no model: set one on the request or in the provider settings', { provider });
  const input: unknown[] = Array.isArray(request.input) ? request.input : [];
  if (input.length === 0 || !(input.every((i) => typeof i === 'string') || input.every(isTokenArray))) {
    throw new LlmError('bad_request', 'input must be a non-empty list of strings or of token arrays', { provider });
  }
  if (request.dimensions !== undefined && (!Number.isInteger(request.dimensions) || request.dimensions <= 0)) {
    throw new LlmError('bad_request', 'dimensions must be a positive integer', { provider });
  }
  return { model, input: request.input };
}

/** embedInputs for a provider that embeds texts only: token arrays are refused (400 token_inputs_not_supported). */
export function embedTexts(settings: ResolvedSettings, request: LlmEmbedRequest): { model: string; input: string[] } {
  const { model, input } = embedInputs(settings, request);
  if (typeof input[0] !== 'string')
    throw new LlmError('bad_request', `${PROVIDER_LABEL[settings.provider]} embeds texts only, not token arrays`, {
      provider: settings.provider,
      code: 'token_inputs_not_supported',
    });
  return { model, input: input as string[] };
}

export interface TurnBlocks<B> {
  text(text: string): B;
  toolCall(call: LlmToolCall): B;
  /** A tool result; `name` is the name of the earlier call it answers, when there was one. */
  toolResult(toolCallId: string, content: string, name: string | undefined, index: number): B;
}

/**
 * Port messages as alternating user / assistant turns of blocks, for the providers that want them so (Anthropic,
 * Gemini, Bedrock): system messages apart, assistant tool calls as blocks of their turn, tool results as blocks of a
 * user turn, consecutive turns of one role merged.
 */
export function buildTurns<B>(
  provider: LlmProviderKind,
  messages: LlmMessage[],
  blocks: TurnBlocks<B>,
): { system: string[]; turns: Array<{ role: 'user' | 'assistant'; content: B[] }> } {
  const system: string[] = [];
  const turns: Array<{ role: 'user' | 'assistant'; content: B[] }> = [];
  const callNames = new Map<string, string>();
  const push = (role: 'user' | 'assistant', content: B[]) => {
    if (content.length === 0) return;
    const last = turns[turns.length - 1];
    if (last && last.role === role) last.content.push(...content);
    else turns.push({ role, content });
  };
  messages.forEach((m, i) => {
    switch (m.role) {
      case 'system':
        system.push(m.content);
        break;
      case 'user':
        push('user', [blocks.text(m.content)]);
        break;
      case 'assistant': {
        const content: B[] = [];
        if (m.content !== '') content.push(blocks.text(m.content));
        for (const call of m.toolCalls ?? []) {
          callNames.set(call.id, call.name);
          content.push(blocks.toolCall(call));
        }
        push('assistant', content);
        break;
      }
      case 'tool':
        if (!m.toolCallId) throw new LlmError('bad_request', `messages[${i}]: a tool message needs toolCallId`, { provider });
        push('user', [blocks.toolResult(m.toolCallId, m.content, callNames.get(m.toolCallId), i)]);
        break;
      default:
        throw new LlmError('bad_request', `messages[${i}]: unknown role`, { provider });
    }
  });
  return { system, turns };
}
