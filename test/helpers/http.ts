/**
 * A tiny HTTP client for tests: real requests on undici's `request` (fetch's web streams cost the test process about
 * three times the CPU a request), JSON in and out, every header visible. Redirects are not followed.
 */
import { request as httpRequest } from 'undici';

export interface Res<T = any> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
}

export interface ReqOptions {
  body?: unknown;
  /** Sent as-is instead of JSON.stringify(body). */
  raw?: string | Buffer;
  token?: string;
  cookie?: string;
  headers?: Record<string, string>;
  /** A 2xx event stream is answered once its headers are in, with no body (a live stream never ends by itself). */
  streamHeadersOnly?: boolean;
}

export function client(baseUrl: string) {
  async function request<T = any>(method: string, path: string, options: ReqOptions = {}): Promise<Res<T>> {
    const headers: Record<string, string> = { ...options.headers };
    if (options.token) headers.authorization = `Bearer ${options.token}`;
    if (options.cookie) headers.cookie = options.cookie;
    let body: string | Buffer | undefined;
    if (options.raw !== undefined) body = options.raw;
    else if (options.body !== undefined) {
      body = JSON.stringify(options.body);
      headers['content-type'] ??= 'application/json';
    }
    const res = await httpRequest(baseUrl + path, { method: method as 'GET', headers, body });
    const seen = new Headers();
    for (const [name, value] of Object.entries(res.headers))
      for (const v of Array.isArray(value) ? value : [value ?? '']) seen.append(name, v);
    const ok = res.statusCode >= 200 && res.statusCode < 300;
    if (options.streamHeadersOnly && ok && seen.get('content-type')?.startsWith('text/event-stream')) {
      res.body.destroy();
      return { status: res.statusCode, headers: seen, body: undefined as T, text: '' };
    }
    const text = await res.body.text();
    let parsed: unknown = undefined;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = undefined;
    }
    return { status: res.statusCode, headers: seen, body: parsed as T, text };
  }
  return {
    request,
    get: <T = any>(path: string, o?: ReqOptions) => request<T>('GET', path, o),
    post: <T = any>(path: string, body?: unknown, o?: ReqOptions) => request<T>('POST', path, { ...o, body }),
    put: <T = any>(path: string, body?: unknown, o?: ReqOptions) => request<T>('PUT', path, { ...o, body }),
    patch: <T = any>(path: string, body?: unknown, o?: ReqOptions) => request<T>('PATCH', path, { ...o, body }),
    del: <T = any>(path: string, o?: ReqOptions) => request<T>('DELETE', path, o),
  };
}

export type Client = ReturnType<typeof client>;

let counter = 0;

export interface Account {
  email: string;
  password: string;
  accessToken: string;
  refreshToken: string;
  cookie: string;
  userId: string;
  tenantId: string;
}

/** Registers a new tenant and owner through the API. */
export async function signUp(api: Client, name = 'Tenant'): Promise<Account> {
  const email = `user${Date.now()}${++counter}${Math.floor(Math.random() * 1e6)}@example.com`;
  const password = 'correct horse battery';
  const res = await api.post('/api/v1/auth/register', { email, password, name: `${name} owner`, tenantName: name });
  if (res.status !== 201) throw new Error(`sign up failed: ${res.status} ${res.text}`);
  const setCookie = res.headers.get('set-cookie') ?? '';
  return {
    email,
    password,
    accessToken: res.body.data.accessToken,
    refreshToken: res.body.data.refreshToken,
    cookie: setCookie.split(';')[0],
    userId: res.body.data.user.id,
    tenantId: res.body.data.tenant.id,
  };
}

/** Creates an API key with the owner's token and returns the secret and id. */
export async function createKey(api: Client, token: string, body: Record<string, unknown> = {}): Promise<{ key: string; id: string }> {
  const res = await api.post('/api/v1/api-keys', { name: 'test key', type: 'sdk', environment: 'development', ...body }, { token });
  if (res.status !== 201) throw new Error(`key creation failed: ${res.status} ${res.text}`);
  return { key: res.body.data.key, id: res.body.data.id };
}

/** Asserts the error envelope and returns the error. */
export function expectError(res: Res, status: number, code: string) {
  expect({ status: res.status, code: res.body?.error?.code }).toEqual({ status, code });
  expect(typeof res.body.error.message).toBe('string');
  expect(res.body.meta.request_id).toBe(res.headers.get('x-request-id'));
  return res.body.error as { code: string; message: string; details: any };
}

/** Polls `check` until it returns true or `ms` pass; returns how long it took. */
export async function eventually(check: () => Promise<boolean>, ms = 5000, step = 50): Promise<number> {
  const start = Date.now();
  for (;;) {
    if (await check()) return Date.now() - start;
    if (Date.now() - start > ms) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, step));
  }
}
