// The console's one way to the API: same-origin requests with the session cookie (the browser adds the Origin header
// the gateway's CSRF rule checks). Errors keep the envelope's code, details and request id.
const API = '/api/v1';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string | undefined,
    readonly details: Record<string, unknown>,
    readonly requestId: string | null,
    message: string,
  ) {
    super(message);
  }
}

interface Envelope<T> {
  data: T;
  meta?: { request_id?: string; pagination?: { next_cursor: string | null; has_more: boolean } };
  error?: { code: string; message: string; details?: Record<string, any> };
}

export async function request<T>(method: string, path: string, body?: unknown): Promise<Envelope<T>> {
  const res = await fetch(API + path, {
    method,
    credentials: 'same-origin',
    headers: { accept: 'application/json', ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json: Envelope<T> | null = null;
  try {
    json = text ? (JSON.parse(text) as Envelope<T>) : null;
  } catch {
    json = null;
  }
  if (!res.ok) {
    const e = json?.error;
    const fields = e?.details?.fields as Array<{ field: string; message: string }> | undefined;
    const detail = Array.isArray(fields) ? ` ${fields.map((f) => `${f.field}: ${f.message}`).join('; ')}` : '';
    const message = `${e?.message ?? `The request failed (HTTP ${res.status}).`}${detail}`;
    throw new ApiError(res.status, e?.code, e?.details ?? {}, json?.meta?.request_id ?? res.headers.get('x-request-id'), message);
  }
  return json as Envelope<T>;
}

export const api = async <T>(method: string, path: string, body?: unknown): Promise<T> => (await request<T>(method, path, body)).data;

/** Every page of a list, following `next_cursor` (console lists are small; `max` bounds the walk). */
export async function listAll<T>(path: string, max = 500): Promise<T[]> {
  const out: T[] = [];
  let cursor: string | null = null;
  do {
    const sep = path.includes('?') ? '&' : '?';
    const page: Envelope<T[]> = await request<T[]>('GET', `${path}${sep}limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    out.push(...page.data);
    cursor = page.meta?.pagination?.has_more ? (page.meta.pagination.next_cursor ?? null) : null;
  } while (cursor && out.length < max);
  return out;
}

export const describe = (err: unknown): string =>
  err instanceof ApiError && err.requestId ? `${err.message} (request id ${err.requestId})` : String((err as Error)?.message ?? err);

/** A 401 on a console page means the session ended: sign in again and come back here. */
export function toLogin(): void {
  location.assign(`/login?next=${encodeURIComponent(location.pathname + location.search)}`);
}
