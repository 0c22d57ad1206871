import { client, createKey, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// The in-memory limiter (no REDIS_URL), with a small limit and a long window so the window never turns
// during the test.
let stack: Stack;
let api: Client;
let owner: Account;
const MAX = 5;

beforeAll(async () => {
  stack = await startStack({ env: { RATE_LIMIT_MAX: String(MAX), RATE_LIMIT_WINDOW_S: '86400' } });
  api = client(stack.url);
  owner = await signUp(api, 'Limited');
});
afterAll(() => stack.stop());

it('counts per principal, with X-RateLimit-* headers, then answers 429 with Retry-After', async () => {
  const { key } = await createKey(api, owner.accessToken);
  const nowS = Math.floor(Date.now() / 1000);
  for (let i = 1; i <= MAX; i++) {
    const res = await api.get('/api/v1/tenant', { token: key });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-ratelimit-limit')).toBe(String(MAX));
    expect(res.headers.get('x-ratelimit-remaining')).toBe(String(MAX - i));
    // Unix epoch seconds of the end of the (epoch-aligned) window.
    const reset = Number(res.headers.get('x-ratelimit-reset'));
    expect(reset % 86400).toBe(0);
    expect(reset).toBeGreaterThan(nowS);
    expect(reset).toBeLessThanOrEqual(nowS + 86400);
  }
  const over = await api.get('/api/v1/tenant', { token: key });
  const err = expectError(over, 429, 'RATE_LIMIT_EXCEEDED');
  expect(err.details).toMatchObject({ limit: MAX });
  const retry = Number(over.headers.get('retry-after'));
  expect(retry).toBeGreaterThanOrEqual(1);
  expect(retry).toBeLessThanOrEqual(86400);
  expect(over.headers.get('x-ratelimit-remaining')).toBe('0');
  expect(over.headers.get('x-ratelimit-limit')).toBe(String(MAX));
  // A 429 is a refusal before anything happens: a write is not performed either.
  expectError(await api.post('/api/v1/projects', { name: 'not created' }, { token: key }), 429, 'RATE_LIMIT_EXCEEDED');
  expect((await api.get('/api/v1/projects', { token: owner.accessToken })).body.data).toEqual([]);
});

it('every key and every user has its own count', async () => {
  const k1 = await createKey(api, owner.accessToken);
  const k2 = await createKey(api, owner.accessToken);
  for (let i = 0; i < MAX; i++) await api.get('/api/v1/tenant', { token: k1.key });
  expectError(await api.get('/api/v1/tenant', { token: k1.key }), 429, 'RATE_LIMIT_EXCEEDED');
  expect((await api.get('/api/v1/tenant', { token: k2.key })).headers.get('x-ratelimit-remaining')).toBe(String(MAX - 1));
  const other = await signUp(api, 'Other');
  expect((await api.get('/api/v1/tenant', { token: other.accessToken })).status).toBe(200);
});

it('counts a user across access token and cookie (one principal)', async () => {
  const u = await signUp(api, 'Person');
  for (let i = 0; i < MAX; i++)
    expect((await api.get('/api/v1/tenant', { token: u.accessToken, cookie: i % 2 ? undefined : u.cookie })).status).toBe(200);
  expectError(await api.get('/api/v1/tenant', { cookie: u.cookie }), 429, 'RATE_LIMIT_EXCEEDED');
});

it('auth routes are exempt and carry no rate-limit headers, even for a principal over its limit', async () => {
  const u = await signUp(api, 'Exempt');
  for (let i = 0; i < MAX; i++) await api.get('/api/v1/tenant', { token: u.accessToken });
  expectError(await api.get('/api/v1/tenant', { token: u.accessToken }), 429, 'RATE_LIMIT_EXCEEDED');
  const answers = [
    await api.get('/api/v1/auth/me', { token: u.accessToken }),
    await api.post('/api/v1/auth/login', { email: u.email, password: u.password }),
    await api.post('/api/v1/auth/refresh', { refreshToken: u.refreshToken }),
    await api.post('/api/v1/auth/login', { email: u.email, password: 'wrong password' }),
  ];
  for (let i = 0; i < 2; i++) answers.push(await api.post('/api/v1/auth/login', { email: 'nobody@example.com', password: 'whatever1' }));
  expect(answers.map((r) => r.status)).toEqual([200, 200, 200, 401, 401, 401]);
  for (const res of answers)
    for (const h of ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset', 'retry-after'])
      expect(res.headers.get(h)).toBeNull();
});

it('unauthenticated system routes are not limited and carry no headers', async () => {
  for (let i = 0; i < MAX + 2; i++) {
    for (const path of ['/healthz', '/api/v1/openapi.json', '/.well-known/jwks.json']) {
      const res = await api.get(path);
      expect(res.status).toBe(200);
      expect(res.headers.get('x-ratelimit-limit')).toBeNull();
    }
  }
});

it('a refused credential is not counted against anyone', async () => {
  const { key } = await createKey(api, owner.accessToken);
  for (let i = 0; i < MAX * 2; i++) expectError(await api.get('/api/v1/tenant', { token: key + 'x' }), 401, 'UNAUTHORIZED');
  expect((await api.get('/api/v1/tenant', { token: key })).headers.get('x-ratelimit-remaining')).toBe(String(MAX - 1));
});
