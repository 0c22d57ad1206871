/**
 * The svc API client (spec 5.12-5.13): typed methods for every operation (generated), a token held in memory only
 * and treated as expired 60 s early, an exchange callback when it is missing or expired, cookies included, an
 * unauthorized callback on 401, typed errors, retries of 429 and 503 after Retry-After, Idempotency-Key on billing
 * POSTs, and streams as async iterators that resume with Last-Event-ID.
 */
import { ApiError, NetworkError } from './errors';
import { GeneratedMethods, OPERATIONS } from './generated/methods';
import { readSse, type SseEvent } from './sse';
import type { CallOptions, Input, OperationId, Output } from './types';

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
  onUnauthorized?: (error: ApiError) => void;
  /** Retries of a 429 or 503 (default 3), each after the Retry-After the API sent (at most `maxRetryDelayMs`). */
  maxRetries?: number;
  maxRetryDelayMs?: number;
  fetch?: typeof fetch;
  /** The clock (epoch ms), for tests. */
  now?: () => number;
  userAgent?: string;
}

/** A token is treated as expired this long before it is (spec 5.12). */
export const EXPIRY_MARGIN_MS = 60_000;
const BILLING_POST = /^\/api\/v1\/billing\/(credits\/purchase|subscription\/create|portal|gift-cards\/redeem)$/;

export type ChatStreamEvent =
  | { type: 'delta'; id: string; messageId: string; delta: string }
  | { type: 'completed'; id: string; message: Record<string, unknown> }
  | { type: 'error'; id: string; code: string; message: string };

export class SvcClient extends GeneratedMethods {
  private token: { value: string; expiresAt: number | null } | null = null;
  private readonly base: string;
  private readonly fetchImpl: typeof fetch;
  private readonly now: () => number;

  constructor(private readonly options: SvcClientOptions) {
    super();
    this.base = options.baseUrl.replace(/\/+$/, '').replace(/\/api\/v1$/, '');
    this.fetchImpl = options.fetch ?? fetch;
    this.now = options.now ?? Date.now;
    if (options.token) this.setToken(options.token);
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

  /** The request of an operation: its URL (path parameters filled, query added) and body. */
  private requestOf(operationId: OperationId, input: Record<string, any>) {
    const op = OPERATIONS[operationId];
    let path: string = op.path;
    for (const name of op.pathParams) {
      const value = input.params?.[name];
      if (value === undefined || value === null || value === '') throw new TypeError(`${operationId}: params.${name} is required`);
      path = path.replace(`{${name}}`, encodeURIComponent(String(value)));
    }
    const query = new URLSearchParams();
    for (const [k, v] of Object.entries(input.query ?? {})) if (v !== undefined && v !== null) query.set(k, String(v));
    const qs = query.toString();
    return { method: op.method as string, path, url: `${this.base}${path}${qs ? `?${qs}` : ''}`, body: input.body };
  }

  /** One HTTP exchange with the API, with auth, retries and typed errors. Answers the raw Response on success. */
  async send(method: string, path: string, url: string, body: unknown, options: CallOptions & { accept?: string } = {}): Promise<Response> {
    const idempotencyKey = options.idempotencyKey ?? (method === 'POST' && BILLING_POST.test(path) ? crypto.randomUUID() : undefined);
    const maxRetries = this.options.maxRetries ?? 3;
    for (let attempt = 0; ; attempt++) {
      const token = await this.credential();
      const headers: Record<string, string> = {
        accept: options.accept ?? 'application/json',
        ...(this.options.userAgent ? { 'user-agent': this.options.userAgent } : {}),
        ...(token ? { authorization: `Bearer ${token}` } : {}),
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...(idempotencyKey ? { 'idempotency-key': idempotencyKey } : {}),
        ...options.headers,
      };
      let res: Response;
      try {
        res = await this.fetchImpl(url, {
          method,
          headers,
          body: body !== undefined ? JSON.stringify(body) : undefined,
          credentials: 'include',
          signal: options.signal,
        });
      } catch (err) {
        if (options.signal?.aborted) throw err;
        throw new NetworkError(`Could not reach ${this.base}: ${(err as Error).message}`, err);
      }
      if (res.ok) return res;
      const error = await errorOf(res);
      if ((res.status === 429 || res.status === 503) && attempt < maxRetries) {
        await sleep(Math.min(error.retryAfterMs ?? 500 * 2 ** attempt, this.options.maxRetryDelayMs ?? 30_000), options.signal);
        continue;
      }
      if (res.status === 401 && !this.options.apiKey) {
        this.token = null;
        this.options.onUnauthorized?.(error);
      }
      throw error;
    }
  }

  protected async call<K extends OperationId>(operationId: K, input: Input<K>, options: CallOptions = {}): Promise<Output<K>> {
    const req = this.requestOf(operationId, (input ?? {}) as Record<string, any>);
    const res = await this.send(req.method, req.path, req.url, req.body, options);
    const text = await res.text();
    return (text ? (JSON.parse(text) as { data: unknown }).data : undefined) as Output<K>;
  }

  /** Every item of a list operation, page after page (cursor pagination). */
  async *paginate<K extends OperationId>(
    operationId: K,
    input: Input<K>,
    options: CallOptions = {},
  ): AsyncGenerator<Output<K> extends Array<infer T> ? T : never> {
    let cursor: string | null = null;
    do {
      const base = (input ?? {}) as Record<string, any>;
      const req = this.requestOf(operationId, { ...base, query: { ...base.query, ...(cursor ? { cursor } : {}) } });
      const res = await this.send(req.method, req.path, req.url, undefined, options);
      const page = (await res.json()) as { data: any[]; meta: { pagination?: { next_cursor: string | null } } };
      for (const item of page.data) yield item;
      cursor = page.meta.pagination?.next_cursor ?? null;
    } while (cursor);
  }

  /**
   * The reply to a chat session's latest message as it streams: deltas, then `completed` or `error`. A dropped
   * connection is resumed with Last-Event-ID (no event lost or repeated), up to `maxResumes` times.
   */
  async *streamChatReply(
    sessionId: string,
    options: CallOptions & { lastEventId?: string; maxResumes?: number } = {},
  ): AsyncGenerator<ChatStreamEvent> {
    let lastEventId = options.lastEventId;
    let resumes = 0;
    for (;;) {
      const req = this.requestOf('streamChatReply', { params: { id: sessionId } });
      let ended = false;
      try {
        const res = await this.send(req.method, req.path, req.url, undefined, {
          ...options,
          accept: 'text/event-stream',
          headers: { ...options.headers, ...(lastEventId ? { 'last-event-id': lastEventId } : {}) },
        });
        for await (const e of readSse(res.body!) as AsyncGenerator<SseEvent<any>>) {
          if (e.id) lastEventId = e.id;
          const id = e.id ?? '';
          if (e.event === 'message.delta') yield { type: 'delta', id, messageId: e.data.messageId, delta: e.data.delta };
          else if (e.event === 'message.completed') {
            ended = true;
            yield { type: 'completed', id, message: e.data.message };
            return;
          } else if (e.event === 'error') {
            ended = true;
            yield { type: 'error', id, code: e.data.code, message: e.data.message };
            return;
          }
        }
      } catch (err) {
        if (err instanceof ApiError || options.signal?.aborted) throw err;
        if (resumes >= (options.maxResumes ?? 5)) throw err;
      }
      if (ended) return;
      // The connection dropped before the reply ended: resume after the last event seen.
      if (resumes++ >= (options.maxResumes ?? 5)) throw new NetworkError('The stream kept dropping');
      await sleep(Math.min(2000, 100 * 2 ** resumes), options.signal);
    }
  }

  /**
   * The tenant's events as they happen (`GET /events/stream`), each as GET /events shows it, until `signal` aborts.
   * A dropped connection is resumed after the last event seen (Last-Event-ID: none lost, none twice), up to
   * `maxResumes` times in a row (default 5; `Infinity` to follow for good); `onResume` hears of each. `onOpen` runs each
   * time a connection is open: events committed from then on are sent.
   */
  async *streamEvents(
    options: CallOptions & {
      lastEventId?: string;
      maxResumes?: number;
      onOpen?: () => void;
      onResume?: (lastEventId: string | undefined) => void;
    } = {},
  ): AsyncGenerator<Output<'getEvent'>> {
    let lastEventId = options.lastEventId;
    let resumes = 0;
    for (;;) {
      const req = this.requestOf('streamEvents', {});
      try {
        const res = await this.send(req.method, req.path, req.url, undefined, {
          ...options,
          accept: 'text/event-stream',
          headers: { ...options.headers, ...(lastEventId ? { 'last-event-id': lastEventId } : {}) },
        });
        options.onOpen?.();
        for await (const e of readSse(res.body!) as AsyncGenerator<SseEvent<Output<'getEvent'>>>) {
          resumes = 0;
          if (e.id) lastEventId = e.id;
          yield e.data;
        }
      } catch (err) {
        if (err instanceof ApiError) throw err;
      }
      // Aborted by the caller: the end it asked for, not an error.
      if (options.signal?.aborted) return;
      // The stream ended (the server restarting) or dropped: resume after the last event seen.
      if (resumes++ >= (options.maxResumes ?? 5)) throw new NetworkError('The event stream kept dropping');
      options.onResume?.(lastEventId);
      await sleep(Math.min(2000, 100 * 2 ** Math.min(resumes, 5)), options.signal);
    }
  }

  /**
   * An agent run's progress: the run each time its status or steps change, until it ends (or waits for an
   * approval, when `untilApproval`). Polls GET /agents/:id/runs/:run_id every `intervalMs`.
   */
  async *followRun(
    agentId: string,
    runId: string,
    options: CallOptions & { intervalMs?: number; untilApproval?: boolean } = {},
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

async function errorOf(res: Response): Promise<ApiError> {
  const requestId = res.headers.get('x-request-id');
  const retryAfter = res.headers.get('retry-after');
  let retryAfterMs: number | null = null;
  if (retryAfter) {
    const s = Number(retryAfter);
    retryAfterMs = Number.isFinite(s) ? Math.max(0, s * 1000) : Math.max(0, Date.parse(retryAfter) - Date.now()) || null;
  }
  let body: any = null;
  try {
    body = await res.json();
  } catch {
    body = null;
  }
  const e = body?.error;
  return new ApiError(
    res.status,
    e?.code ?? `HTTP_${res.status}`,
    e?.message ?? `The API answered ${res.status}`,
    e?.details ?? {},
    body?.meta?.request_id ?? requestId,
    retryAfterMs,
  );
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
