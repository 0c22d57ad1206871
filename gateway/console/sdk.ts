// The console's one way to the API: @svc/sdk/browser, same-origin with the session cookie (the browser adds the
// Origin header the gateway's CSRF rule checks). Pages call operations by their OpenAPI id through `call` and
// `listAll`; this file alone knows how the SDK spells them, so a change of the SDK's shape is a change here only.
import { ApiError, SvcClient, type ChatStreamEvent, type Input, type OperationId, type Output, type Page } from '@svc/sdk/browser';

export { ApiError, type ChatStreamEvent, type Output };

const client = new SvcClient({ baseUrl: location.origin, maxRetries: 1 });

type Method<K extends OperationId> = (input: Input<K>) => Promise<Output<K>>;
/** An item of a list operation's answer. */
export type Item<K extends OperationId> = Output<K> extends Array<infer T> ? T : never;

/** One API operation: its answer's `data`. */
export function call<K extends OperationId>(operation: K, input: Input<K>): Promise<Output<K>> {
  return (client[operation as keyof SvcClient] as unknown as Method<K>).call(client, input);
}

/** Every item of a list operation, page after page until the last (no cap: a list shows all it has). */
export async function listAll<K extends OperationId>(operation: K, input: Input<K>): Promise<Array<Item<K>>> {
  const out: Array<Item<K>> = [];
  const base = (input ?? {}) as { query?: Record<string, unknown> };
  for await (const item of client.paginate(operation, { ...base, query: { limit: 100, ...base.query } } as Input<K>))
    out.push(item as Item<K>);
  return out;
}

/**
 * A long list read on demand (the request log, the audit log, events): `next(n)` answers up to n more items and
 * whether any are left, following the cursor, so a page shows what it has and offers the rest. Whether any are left
 * is the SDK's answer (the last page's `hasMore`, from the API's `has_more`): a last page that is exactly full offers
 * no more.
 */
export function pager<K extends OperationId>(operation: K, input: Input<K>) {
  const base = (input ?? {}) as { query?: Record<string, unknown> };
  const list = client.paged(operation, { ...base, query: { limit: 50, ...base.query } } as Input<K>);
  let page: Page<Item<K>> | null = null;
  // The items of the last page read that have not been answered yet.
  let unread: Array<Item<K>> = [];
  const more = () => unread.length > 0 || page === null || page.hasMore;
  return {
    async next(n: number): Promise<{ items: Array<Item<K>>; more: boolean }> {
      const out: Array<Item<K>> = [];
      while (out.length < n && more()) {
        if (unread.length === 0) {
          page = page ? await page.nextPage() : await list.page();
          unread = [...page.data];
        }
        out.push(...unread.splice(0, n - out.length));
      }
      return { items: out, more: more() };
    },
  };
}

/** The assistant's reply to a session's latest message as it streams (resumed with Last-Event-ID on a drop). */
export const streamChatReply = (sessionId: string, signal?: AbortSignal): AsyncGenerator<ChatStreamEvent> =>
  client.streamChatReply(sessionId, { signal });

/** An error for people: the API's message, each invalid field, and the request id to quote. */
export function describe(err: unknown): string {
  if (!(err instanceof ApiError)) return String((err as Error)?.message ?? err);
  const fields = err.details.fields as Array<{ field: string; message: string }> | undefined;
  const detail = Array.isArray(fields) ? ` ${fields.map((f) => `${f.field}: ${f.message}`).join('; ')}` : '';
  return `${err.message}${detail}${err.requestId ? ` (request id ${err.requestId})` : ''}`;
}

/** A 401 on a console page means the session ended: sign in again and come back here. */
export function toLogin(): void {
  location.assign(`/login?next=${encodeURIComponent(location.pathname + location.search)}`);
}

/**
 * A 401 that means "sign in again": on a signed-in page (it has the Sign out button). On the pages of a visitor who
 * is not signed in (sign-in itself, the emailed links) a 401 is the answer to show, e.g. a wrong password.
 */
export const isUnauthorized = (err: unknown) =>
  err instanceof ApiError && err.status === 401 && document.getElementById('sign-out') !== null;
