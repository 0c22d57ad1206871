/**
 * The CLI's one door to @svc/sdk. Commands speak HTTP paths (`GET /projects`, as the API reference and `svc api`
 * do) and never touch the SDK's method names, so when the SDK's surface changes only this file changes.
 * Today it rides on the SDK's `requestRaw` (auth, token renewal, retries, typed errors) plus its two streams.
 */
import { ApiError, NetworkError, SvcClient, type ChatStreamEvent, type Output, type SvcClientOptions } from '@svc/sdk';

export { ApiError, NetworkError, type ChatStreamEvent };
export type Run = Output<'getAgentRun'>;
export type ClientOptions = SvcClientOptions;

export interface RequestOptions {
  query?: Record<string, string | number | boolean | undefined | null>;
  body?: unknown;
}

/** One page of a list: its items and the cursor of the next page (null on the last). */
export interface Page<T> {
  items: T[];
  nextCursor: string | null;
}

/** A path with each interpolated value URL-encoded: apiPath`/projects/${id}`. */
export function apiPath(parts: TemplateStringsArray, ...values: Array<string | number>): string {
  return parts.reduce((out, part, i) => out + part + (i < values.length ? encodeURIComponent(String(values[i])) : ''), '');
}

export class Api {
  private readonly client: SvcClient;

  constructor(options: ClientOptions) {
    this.client = new SvcClient(options);
  }

  /**
   * The raw answer: the parsed JSON body (the whole envelope), or the text when it is not JSON. The path is the SDK's
   * to place (`/projects` is under /api/v1, one under /api/ or /v1/ is taken as it is); its query is sent as one.
   */
  async raw(method: string, path: string, options: RequestOptions = {}): Promise<unknown> {
    const [pathname, inlineQuery = ''] = path.split('?', 2);
    const query: Record<string, string> = Object.fromEntries(new URLSearchParams(inlineQuery));
    for (const [k, v] of Object.entries(options.query ?? {})) if (v !== undefined && v !== null) query[k] = String(v);
    // The SDK sends one Idempotency-Key per POST, kept across its retries, so a retried 503 cannot do the work twice.
    return (await this.client.requestRaw(method, pathname, { query, body: options.body })).body;
  }

  /** The `data` of the answer's envelope. */
  async call<T = any>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const body = (await this.raw(method, path, options)) as { data?: T } | undefined;
    return body?.data as T;
  }

  async page<T = any>(path: string, query: RequestOptions['query'], cursor: string | null, limit: number): Promise<Page<T>> {
    const body = (await this.raw('GET', path, { query: { ...query, limit, ...(cursor ? { cursor } : {}) } })) as {
      data: T[];
      meta?: { pagination?: { next_cursor?: string | null } };
    };
    return { items: body.data, nextCursor: body.meta?.pagination?.next_cursor ?? null };
  }

  /** The reply to a chat session's latest message as it streams (resumed after a dropped connection). */
  chatReply(sessionId: string): AsyncGenerator<ChatStreamEvent> {
    return this.client.streamChatReply(sessionId);
  }

  /** The tenant's live events (GET /events/stream), resumed after a dropped connection with Last-Event-ID. */
  events(options: Parameters<SvcClient['streamEvents']>[0]): AsyncGenerator<unknown> {
    return this.client.streamEvents(options);
  }

  /** A run each time its status or steps change, until it ends or waits for an approval. */
  followRun(agentId: string, runId: string): AsyncGenerator<Run> {
    return this.client.followRun(agentId, runId, { intervalMs: 300, untilApproval: true });
  }
}
