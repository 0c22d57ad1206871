/**
 * The svc API client (spec 5.12-5.13): resources generated from the OpenAPI document (`svc.projects.create(...)`,
 * `svc.agents.runs.list(agentId)`; see generated/resources.ts), and below them one method per operationId
 * (`svc.createProject({ body })`) and `svc.request(method, path)`. Every call goes through `send`: a token held in
 * memory only and treated as expired 60 s early, an exchange callback when it is missing or expired, cookies included,
 * an unauthorized callback on 401, an error class per status, a timeout per attempt, and retries with jittered
 * exponential backoff (408, 409 `idempotency_key_in_progress`, 429 after `Retry-After`, 5xx, no answer) that reuse one
 * `Idempotency-Key` per POST, so a retry never does the work twice. Streams resume after a dropped connection.
 */
import { APIConnectionError, APIError, APITimeoutError, type SvcError } from './errors';
import { GeneratedMethods, OPERATIONS } from './generated/methods';
import { RESOURCE_METHODS, type Resources } from './generated/resources';
import { PagedList, type PageAnswer } from './pagination';
import { resumableSse, type ResumeOptions, type SseEvent } from './sse';
import type { ChatStreamEvent, Input, Item, OperationId, Output, RequestOptions, StreamOptions } from './types';

export interface Token {
  accessToken: string;
  /** Seconds from now; without it the token is used until the API refuses it. */
  expiresIn?: number;
}

export interface SvcClientOptions {
  /** The service's address, e.g. http://localhost:8080 (with or without /api/v1). */
  baseUrl: string;
  /** An API key: sent as the bearer credential, never exchanged. */
  apiKey?: string;
  /** A token to start with (e.g. from a CLI login). */
  token?: Token;
  /** Called when there is no token or it is (about to be) expired: an external session's token for a new one. */
  exchange?: () => Promise<Token | null>;
  /** Called on every 401 (after the token is dropped): sign the user in again. */
  onUnauthorized?: (error: APIError) => void;
  /** Retries after the first attempt (default 2), for 408, 409 in progress, 429, 5xx and no answer. */
  maxRetries?: number;
  /** The longest wait before a retry, whatever `Retry-After` says (default 60 s). */
  maxRetryDelayMs?: number;
  /** Milliseconds for each attempt, until the answer's headers for a stream, its whole body otherwise (default 60 s). */
  timeout?: number;
  fetch?: typeof fetch;
  /** The clock (epoch ms), for tests. */
  now?: () => number;
  userAgent?: string;
}

/** A token is treated as expired this long before it is (spec 5.12). */
export const EXPIRY_MARGIN_MS = 60_000;
export const DEFAULT_TIMEOUT_MS = 60_000;
export const DEFAULT_MAX_RETRIES = 2;

export type { ChatStreamEvent };

interface Req {
  method: string;
  url: string;
  body?: unknown;
}
type SendOptions = RequestOptions & { accept?: string };

/**
 * The client: resources (generated) over the flat methods (generated) over `send`. The resources' types merge into the
 * class here; `mountResources` puts their functions on each instance.
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type, @typescript-eslint/no-unsafe-declaration-merging
export interface SvcClient extends Resources {}
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging
export class SvcClient extends GeneratedMethods {
  private token: { value: string; expiresAt: number | null } | null = null;
  private readonly base: string;
  private readonly fetchImpl: typeof fetch;
  private readonly now: () => number;

  /**
   * OpenAI's Responses API under /v1 (an API key with `llm:use`), as a resumable stream; for the rest of /v1 use an
   * OpenAI SDK with `baseURL: <origin>/v1`.
   */
  readonly v1 = {
    responses: {
      /**
       * `POST /v1/responses` with `stream: true`: the response's events (`response.created`,
       * `response.output_text.delta`, ..., `response.completed`). A dropped connection is resumed with
       * `GET /v1/responses/{id}?stream=true&starting_after=<last sequence_number>`: no event lost or repeated.
       */
      stream: (body: V1ResponseBody, options: StreamOptions = {}) => this.streamResponse(body, options),
    },
  };

  constructor(private readonly options: SvcClientOptions) {
    super();
    this.base = options.baseUrl.replace(/\/+$/, '').replace(/\/api\/v1$/, '');
    // The global fetch called as itself: held as this object's method, a browser refuses it ("Illegal invocation").
    this.fetchImpl = options.fetch ?? ((input, init) => fetch(input, init));
    this.now = options.now ?? Date.now;
    if (options.token) this.setToken(options.token);
    this.mountResources();
  }

  /** Holds a token in memory (never persisted by the SDK). */
  setToken(token: Token): void {
    this.token = {
      value: token.accessToken,
      expiresAt: token.expiresIn !== undefined ? this.now() + token.expiresIn * 1000 : null,
    };
  }

  clearToken(): void {
    this.token = null;
  }

  /**
   * Any call, for what the resources do not cover: `svc.request('GET', '/projects', { query: { limit: 5 } })`. A path
   * not under `/api/` or `/v1/` is under `/api/v1`; answers the envelope's `data` (under /v1, the whole body).
   */
  async request<T = unknown>(
    method: string,
    path: string,
    input: { query?: Record<string, unknown>; body?: unknown } = {},
    options: RequestOptions = {},
  ): Promise<T> {
    const { path: full, body } = await this.requestRaw(method, path, input, options);
    // /v1 speaks OpenAI's wire format, with no envelope.
    return (full.startsWith('/v1/') ? body : (body as { data?: unknown } | undefined)?.data) as T;
  }

  /**
   * `request`'s whole answer: status, headers and the parsed body (under /api/v1 the envelope, `meta` included; text
   * when it is not JSON). For a client that shows the API's answers as they are (the CLI's `svc api`).
   */
  async requestRaw(
    method: string,
    path: string,
    input: { query?: Record<string, unknown>; body?: unknown } = {},
    options: RequestOptions = {},
  ): Promise<{ path: string; status: number; headers: Headers; body: unknown }> {
    const full = path.startsWith('/api/') || path.startsWith('/v1/') ? path : `/api/v1${path.startsWith('/') ? '' : '/'}${path}`;
    const { res, text } = await this.send({ method: method.toUpperCase(), url: this.urlOf(full, input.query), body: input.body }, options);
    let body: unknown = text || undefined;
    try {
      body = text ? JSON.parse(text) : undefined;
    } catch {
      // Not JSON: the text as it came.
    }
    return { path: full, status: res.status, headers: res.headers, body };
  }

  /** Builds `svc.projects`, `svc.agents.runs`, ... from the generated table: each calls its operation. */
  private mountResources(): void {
    for (const [dotted, operationId] of Object.entries(RESOURCE_METHODS)) {
      const names = dotted.split('.');
      let node = this as unknown as Record<string, any>;
      for (const name of names.slice(0, -1)) node = node[name] ??= {};
      node[names[names.length - 1]] = (...args: unknown[]) => this.invoke(operationId, args);
    }
  }

  /** A resource method's call: its path parameters first, then its body (or query), then the options. */
  private invoke(operationId: OperationId, args: unknown[]): unknown {
    const op = OPERATIONS[operationId];
    const n = op.pathParams.length;
    const params = Object.fromEntries(op.pathParams.map((name, i) => [name, args[i]]));
    if (op.stream) {
      const options = (args[n] ?? {}) as StreamOptions;
      return this.stream(operationId, { params, query: options.query }, options);
    }
    // The body or the query, when the operation takes one; the options come last.
    const takes = op.body || op.query;
    const arg = (takes ? args[n] : undefined) as Record<string, unknown> | undefined;
    const options = args[takes ? n + 1 : n] as RequestOptions | undefined;
    const input = { params, ...(op.body ? { body: arg } : { query: arg }) } as unknown as Input<OperationId>;
    return op.list ? this.paged(operationId, input, options) : this.call(operationId, input, options);
  }

  private async credential(): Promise<string | null> {
    if (this.options.apiKey) return this.options.apiKey;
    const fresh = this.token && (this.token.expiresAt === null || this.token.expiresAt - EXPIRY_MARGIN_MS > this.now());
    if (!fresh && this.options.exchange) {
      const next = await this.options.exchange();
      if (next) this.setToken(next);
      else this.token = null;
    }
    return this.token?.value ?? null;
  }

  private urlOf(path: string, query: Record<string, unknown> = {}): string {
    const qs = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null) qs.set(k, String(v));
    const q = qs.toString();
    return `${this.base}${path}${q ? `?${q}` : ''}`;
  }

  /** The request of an operation: its URL (path parameters filled, query added) and body. */
  private requestOf(operationId: OperationId, input: Record<string, any>): Req {
    const op = OPERATIONS[operationId];
    let path: string = op.path;
    for (const name of op.pathParams) {
      const value = input.params?.[name];
      if (value === undefined || value === null || value === '') throw new TypeError(`${operationId}: params.${name} is required`);
      path = path.replace(`{${name}}`, encodeURIComponent(String(value)));
    }
    return { method: op.method, url: this.urlOf(path, input.query), body: input.body };
  }

  /**
   * One call to the API: attempts until one succeeds, fails in a way a retry cannot mend, or retries run out. Answers
   * the Response and, unless it is a stream, its body's text (read within the attempt, so a cut body is retried too).
   */
  private async send(req: Req, options: SendOptions = {}): Promise<{ res: Response; text: string }> {
    const stream = options.accept === 'text/event-stream';
    // One key per logical call: every retry of this POST carries it, so the API does the work once.
    const idempotencyKey = options.idempotencyKey ?? (req.method === 'POST' ? uuid() : undefined);
    const maxRetries = options.maxRetries ?? this.options.maxRetries ?? DEFAULT_MAX_RETRIES;
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.attempt(req, options, idempotencyKey, stream);
      } catch (error) {
        if (!retryable(error) || attempt >= maxRetries || options.signal?.aborted) throw error;
        await sleep(this.retryDelay(attempt, error as SvcError), options.signal);
      }
    }
  }

  private async attempt(req: Req, options: SendOptions, idempotencyKey: string | undefined, stream: boolean) {
    const token = await this.credential();
    const headers: Record<string, string> = {
      accept: options.accept ?? 'application/json',
      ...(this.options.userAgent ? { 'user-agent': this.options.userAgent } : {}),
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...(req.body !== undefined ? { 'content-type': 'application/json' } : {}),
      ...(idempotencyKey ? { 'idempotency-key': idempotencyKey } : {}),
      ...options.headers,
    };
    // This attempt's own signal: the caller's abort, or the timeout.
    const controller = new AbortController();
    const timeoutMs = options.timeout ?? this.options.timeout ?? DEFAULT_TIMEOUT_MS;
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, timeoutMs);
    const onAbort = () => controller.abort(options.signal?.reason);
    if (options.signal?.aborted) onAbort();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const res = await this.fetchImpl(req.url, {
        method: req.method,
        headers,
        body: req.body !== undefined ? JSON.stringify(req.body) : undefined,
        credentials: 'include',
        signal: controller.signal,
      });
      if (res.ok && stream) return { res, text: '' };
      const text = await res.text();
      if (res.ok) return { res, text };
      const error = errorOf(res, text);
      if (res.status === 401 && !this.options.apiKey) {
        this.token = null;
        this.options.onUnauthorized?.(error);
      }
      throw error;
    } catch (err) {
      if (err instanceof APIError || options.signal?.aborted) throw err;
      if (timedOut) throw new APITimeoutError(`No answer from ${this.base} within ${timeoutMs} ms`, err);
      throw new APIConnectionError(`Could not reach ${this.base}: ${(err as Error).message}`, err);
    } finally {
      clearTimeout(timer);
      if (!stream) options.signal?.removeEventListener('abort', onAbort);
    }
  }

  /** `Retry-After` when the API gave one, else 0.5 s doubling up to 8 s, less up to a quarter at random. */
  private retryDelay(attempt: number, error?: SvcError): number {
    const max = this.options.maxRetryDelayMs ?? 60_000;
    if (error instanceof APIError && error.retryAfterMs !== null) return Math.min(error.retryAfterMs, max);
    return Math.min(500 * 2 ** attempt, 8000, max) * (1 - Math.random() * 0.25);
  }

  protected async call<K extends OperationId>(operationId: K, input: Input<K>, options: RequestOptions = {}): Promise<Output<K>> {
    const { text } = await this.send(this.requestOf(operationId, (input ?? {}) as Record<string, any>), options);
    return (text ? (JSON.parse(text) as { data: unknown }).data : undefined) as Output<K>;
  }

  /**
   * A list operation's pages (what `svc.<resource>.list()` answers), by `meta.pagination.next_cursor`: a page says
   * whether another follows (`hasMore`), so a reader never asks for one that is not there.
   */
  paged<K extends OperationId>(operationId: K, input: Input<K>, options: RequestOptions = {}): PagedList<Item<K>> {
    const base = (input ?? {}) as Record<string, any>;
    return new PagedList(async (cursor): Promise<PageAnswer<Item<K>>> => {
      const req = this.requestOf(operationId, { ...base, query: { ...base.query, ...(cursor ? { cursor } : {}) } });
      const { text } = await this.send(req, options);
      const page = JSON.parse(text) as { data: Item<K>[]; meta: { request_id?: string; pagination?: { next_cursor: string | null } } };
      return { data: page.data, nextCursor: page.meta.pagination?.next_cursor ?? null, requestId: page.meta.request_id ?? null };
    }, base.query?.cursor);
  }

  /** Every item of a list operation, page after page (the lower layer of `svc.<resource>.list()`). */
  async *paginate<K extends OperationId>(
    operationId: K,
    input: Input<K>,
    options: RequestOptions = {},
  ): AsyncGenerator<Output<K> extends Array<infer T> ? T : never> {
    yield* this.paged(operationId, input, options) as AsyncIterable<any>;
  }

  /** How every stream resumes: from the caller's last event id, after the retries' backoff, not after an error answer. */
  private resumeOptions(options: StreamOptions): Omit<ResumeOptions, 'cursorOf' | 'isLast'> {
    return {
      after: options.lastEventId,
      maxResumes: options.maxResumes,
      signal: options.signal,
      onOpen: options.onOpen,
      onResume: options.onResume,
      isFatal: (err) => !retryable(err),
      pause: (resume) => sleep(this.retryDelay(resume - 1), options.signal),
    };
  }

  /** A streaming operation's events, resumed after a dropped connection with Last-Event-ID. */
  private stream(operationId: OperationId, input: Record<string, any>, options: StreamOptions): AsyncGenerator<unknown> {
    if (operationId === 'streamChatReply') return this.streamChatReply(String(input.params.id), options);
    return this.eventStream(this.requestOf(operationId, input), options);
  }

  private eventStream(req: Req, options: StreamOptions, isLast?: (e: SseEvent<any>) => boolean): AsyncGenerator<SseEvent<any>> {
    return resumableSse(
      async (lastEventId) => {
        const headers = { ...options.headers, ...(lastEventId ? { 'last-event-id': lastEventId } : {}) };
        const { res } = await this.send(req, { ...options, headers, accept: 'text/event-stream' });
        return res.body!;
      },
      { ...this.resumeOptions(options), isLast },
    );
  }

  /**
   * The reply to a chat session's latest message as it streams: deltas, then `completed` or `error`. A dropped
   * connection is resumed with Last-Event-ID (no event lost or repeated), up to `maxResumes` times.
   */
  async *streamChatReply(sessionId: string, options: StreamOptions = {}): AsyncGenerator<ChatStreamEvent> {
    const req = this.requestOf('streamChatReply', { params: { id: sessionId } });
    const ends = (e: SseEvent<any>) => e.event === 'message.completed' || e.event === 'error';
    for await (const e of this.eventStream(req, options, ends)) {
      const id = e.id ?? '';
      if (e.event === 'message.delta') yield { type: 'delta', id, messageId: e.data.messageId, delta: e.data.delta };
      else if (e.event === 'message.completed') yield { type: 'completed', id, message: e.data.message };
      else if (e.event === 'error') yield { type: 'error', id, code: e.data.code, message: e.data.message };
    }
  }

  private async *streamResponse(body: V1ResponseBody, options: StreamOptions): AsyncGenerator<SseEvent<V1ResponseEvent>> {
    let responseId: string | undefined;
    const events = resumableSse(
      async (after) => {
        // Until the response has an id there is nothing to resume: the first connection's failure is final.
        if (responseId === undefined && after !== undefined) throw new APIConnectionError('The stream dropped before the response began');
        const req: Req =
          responseId === undefined
            ? { method: 'POST', url: this.urlOf('/v1/responses'), body: { ...body, stream: true } }
            : {
                method: 'GET',
                url: this.urlOf(`/v1/responses/${encodeURIComponent(responseId)}`, { stream: true, starting_after: after }),
              };
        return (await this.send(req, { ...options, accept: 'text/event-stream' })).res.body!;
      },
      {
        ...this.resumeOptions(options),
        cursorOf: (e) => (typeof e.data?.sequence_number === 'number' ? String(e.data.sequence_number) : undefined),
        isLast: (e) => END_OF_RESPONSE.has(e.event) || (e.event === 'error' && typeof e.data?.sequence_number === 'number'),
      },
    );
    for await (const e of events) {
      responseId ??= e.data?.response?.id;
      // An unnumbered error is the gateway's connection breaking, not the response: the stream resumes after it.
      if (e.event === 'error' && typeof e.data?.sequence_number !== 'number') continue;
      yield e;
    }
  }

  /**
   * The tenant's events as they happen (`GET /events/stream`), each as GET /events shows it, until `signal` aborts.
   * A dropped connection is resumed after the last event seen (Last-Event-ID: none lost, none twice), up to
   * `maxResumes` times in a row (default 5; `Infinity` to follow for good); `onResume` hears of each. `onOpen` runs each
   * time a connection is open: events committed from then on are sent.
   */
  async *streamEvents(options: StreamOptions = {}): AsyncGenerator<Output<'getEvent'>> {
    try {
      for await (const e of this.eventStream(this.requestOf('streamEvents', {}), options)) yield e.data as Output<'getEvent'>;
    } catch (err) {
      // Aborted by the caller: the end it asked for, not an error.
      if (options.signal?.aborted) return;
      throw err;
    }
  }

  /**
   * An agent run's progress: the run each time its status or steps change, until it ends (or waits for an
   * approval, when `untilApproval`). Polls GET /agents/:id/runs/:run_id every `intervalMs`.
   */
  async *followRun(
    agentId: string,
    runId: string,
    options: RequestOptions & { intervalMs?: number; untilApproval?: boolean } = {},
  ): AsyncGenerator<Output<'getAgentRun'>> {
    let seen = '';
    for (;;) {
      const run = await this.getAgentRun({ params: { id: agentId, run_id: runId } }, options);
      const r = run as unknown as { status: string; steps?: Array<{ status: string }> };
      const mark = `${r.status}:${(r.steps ?? []).map((s) => s.status).join(',')}`;
      if (mark !== seen) {
        seen = mark;
        yield run;
      }
      if (['completed', 'failed', 'cancelled'].includes(r.status)) return;
      if (options.untilApproval && r.status === 'requires_approval') return;
      await sleep(options.intervalMs ?? 500, options.signal);
    }
  }
}

/** The body of `POST /v1/responses` (OpenAI's); `stream` is set by the SDK. */
export type V1ResponseBody = { model: string; input: unknown } & Record<string, unknown>;
/** An event of a streamed response: its `type` and `sequence_number`, and the fields of that type. */
export type V1ResponseEvent = { type: string; sequence_number: number } & Record<string, any>;
const END_OF_RESPONSE = new Set(['response.completed', 'response.failed', 'response.incomplete']);

/** Worth another attempt: no answer, or an answer that says to come back (never a 4xx about the request itself). */
function retryable(error: unknown): boolean {
  if (error instanceof APIConnectionError) return true;
  if (!(error instanceof APIError)) return false;
  const { status, code, details } = error;
  // The in-progress 409 says so in `details.reason` under /api/v1 (its code is CONFLICT), in `code` under /v1.
  const inProgress = [code, details.reason].some((c) => String(c).toLowerCase() === 'idempotency_key_in_progress');
  return status === 408 || status === 429 || status >= 500 || (status === 409 && inProgress);
}

/** The error of an answer, from its envelope (or OpenAI's `{error: {message, type, code}}` under /v1). */
function errorOf(res: Response, text: string): APIError {
  let body: any = null;
  try {
    body = JSON.parse(text);
  } catch {
    body = null;
  }
  const e = body?.error;
  return APIError.of(
    res.status,
    e?.code ?? e?.type ?? `HTTP_${res.status}`,
    e?.message ?? `The API answered ${res.status}`,
    e?.details ?? {},
    body?.meta?.request_id ?? res.headers.get('x-request-id'),
    retryAfterOf(res.headers),
    res.headers,
  );
}

function retryAfterOf(headers: Headers): number | null {
  const ms = Number(headers.get('retry-after-ms'));
  if (headers.get('retry-after-ms') && Number.isFinite(ms)) return Math.max(0, ms);
  const value = headers.get('retry-after');
  if (!value) return null;
  const s = Number(value);
  if (Number.isFinite(s)) return Math.max(0, s * 1000);
  const at = Date.parse(value);
  return Number.isFinite(at) ? Math.max(0, at - Date.now()) : null;
}

/** A random UUID; `crypto.randomUUID` is missing outside secure contexts in browsers. */
function uuid(): string {
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((ok, fail) => {
    if (signal?.aborted) return fail(signal.reason);
    const t = setTimeout(ok, ms);
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(t);
        fail(signal.reason);
      },
      { once: true },
    );
  });
}
