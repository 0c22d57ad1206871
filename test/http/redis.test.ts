import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startRedis } from '../helpers/redis';
import { startStack, type Stack } from '../helpers/stack';

// Two gateway instances in front of the same services, sharing a real Redis: one rate-limit count, and
// revocations pushed to every instance. Polling is slowed to its maximum (1 s) so that the one-second
// guarantees below hold because of Redis, not because of the poll.
let redis: Awaited<ReturnType<typeof startRedis>>;
let redisStopped = false;
let stack: Stack;
let a: Client;
let b: Client;
let owner: Account;
let openai: FakeProviderServer;
const MAX = 30;

beforeAll(async () => {
  redis = await startRedis();
  openai = await startFakeOpenAI();
  stack = await startStack({
    gateways: 2,
    env: {
      EGRESS_ALLOW_PRIVATE: 'true',
      REDIS_URL: redis.url,
      RATE_LIMIT_MAX: String(MAX),
      RATE_LIMIT_WINDOW_S: '86400',
      REVOCATION_POLL_MS: '1000',
    },
  });
  a = client(stack.gateways[0].url);
  b = client(stack.gateways[1].url);
  owner = await signUp(a, 'Shared');
});
afterAll(async () => {
  await openai.close();
  await stack.stop();
  if (!redisStopped) await redis.stop();
});

it('both instances answer for the same system', async () => {
  expect(stack.gateways[0].url).not.toBe(stack.gateways[1].url);
  const { key } = await createKey(a, owner.accessToken);
  expect((await b.get('/api/v1/tenant', { token: key })).body.data.id).toBe(owner.tenantId);
});

it('share one rate-limit count per principal', async () => {
  const { key } = await createKey(a, owner.accessToken);
  const seen: number[] = [];
  const resets = new Set<string>();
  for (let i = 0; i < MAX; i++) {
    const res = await (i % 2 ? b : a).get('/api/v1/tenant', { token: key });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-ratelimit-limit')).toBe(String(MAX));
    seen.push(Number(res.headers.get('x-ratelimit-remaining')));
    resets.add(res.headers.get('x-ratelimit-reset')!);
  }
  // One count across both instances: MAX-1, MAX-2, ... 0, and both agree on when the window resets.
  expect(seen).toEqual(Array.from({ length: MAX }, (_, i) => MAX - 1 - i));
  expect(resets.size).toBe(1);
  for (const gw of [a, b]) {
    const over = await gw.get('/api/v1/tenant', { token: key });
    expectError(over, 429, 'RATE_LIMIT_EXCEEDED');
    expect(Number(over.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(over.headers.get('x-ratelimit-remaining')).toBe('0');
  }
  // Another principal has its own count.
  const other = await createKey(a, owner.accessToken);
  expect((await b.get('/api/v1/tenant', { token: other.key })).headers.get('x-ratelimit-remaining')).toBe(String(MAX - 1));
});

it('a key revoked through one instance is refused by the other within one second', async () => {
  const { key, id } = await createKey(a, owner.accessToken);
  // Both instances have the key cached.
  expect((await a.get('/api/v1/tenant', { token: key })).status).toBe(200);
  expect((await b.get('/api/v1/tenant', { token: key })).status).toBe(200);
  expect((await a.del(`/api/v1/api-keys/${id}`, { token: owner.accessToken })).status).toBe(200);
  const took = await eventually(async () => (await b.get('/api/v1/tenant', { token: key })).status === 401, 3000, 10);
  expect(took).toBeLessThan(1000);
  expectError(await b.get('/api/v1/auth/me', { token: key }), 401, 'UNAUTHORIZED');
});

it('a logout through one instance ends the access token on the other within one second', async () => {
  const user = await signUp(a, 'Leaving');
  expect((await b.get('/api/v1/tenant', { token: user.accessToken })).status).toBe(200);
  expect((await a.post('/api/v1/auth/logout', undefined, { token: user.accessToken })).status).toBe(200);
  const took = await eventually(async () => (await b.get('/api/v1/tenant', { token: user.accessToken })).status === 401, 3000, 10);
  expect(took).toBeLessThan(1000);
});

it('an allowlist change through one instance applies on the other within one second', async () => {
  const t = await signUp(a, 'Fenced');
  const { key } = await createKey(a, t.accessToken);
  expect((await b.get('/api/v1/tenant', { token: key })).status).toBe(200);
  expect((await a.put('/api/v1/tenant/security/network', { ipAllowlist: ['203.0.113.0/24'] }, { token: t.accessToken })).status).toBe(200);
  const took = await eventually(async () => (await b.get('/api/v1/tenant', { token: key })).status === 403, 3000, 10);
  expect(took).toBeLessThan(1000);
  expect(expectError(await b.get('/api/v1/tenant', { token: key }), 403, 'FORBIDDEN').details.reason).toBe('ip_not_allowed');
});

// Last: stops Redis, then starts it again on the same port.
it("holds a key's concurrent pass-through calls across both instances", async () => {
  const llm = { provider: 'openai', model: 'gpt-shared', baseUrl: openai.url, apiKey: 'sk-shared-' + 'r'.repeat(32) };
  expect((await a.patch('/api/v1/tenant/settings/llm', llm, { token: owner.accessToken })).status).toBe(200);
  const { key } = await createKey(a, owner.accessToken, { limits: { concurrency: 1 } });
  const chat = { model: 'gpt-shared', stream: true, messages: [{ role: 'user', content: 'hi' }] };
  openai.script({ type: 'text', text: 'held open', holdEndMs: 10_000 });
  const controller = new AbortController();
  const held = await fetch(`${stack.gateways[0].url}/v1/passthrough/openai/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(chat),
    signal: controller.signal,
  });
  expect(held.status).toBe(200);
  const refused = await b.post('/v1/passthrough/openai/chat/completions', { ...chat, stream: false }, { token: key });
  expect(refused.status).toBe(429);
  expect(refused.body.error.message).toMatch(/at most 1 calls in progress/);
  controller.abort();
  await eventually(
    async () => (await b.post('/v1/passthrough/openai/chat/completions', { ...chat, stream: false }, { token: key })).status === 200,
    5000,
    300, // few tries: the key's requests count against RATE_LIMIT_MAX
  );
});

it('keeps answering, counting locally, when Redis goes away, and shares counts again when it is back', async () => {
  const { key } = await createKey(a, owner.accessToken);
  expect((await a.get('/api/v1/tenant', { token: key })).status).toBe(200);
  await redis.stop();
  redisStopped = true;
  for (const gw of [a, b]) {
    const res = await gw.get('/api/v1/tenant', { token: key });
    expect(res.status).toBe(200);
    expect(Number(res.headers.get('x-ratelimit-remaining'))).toBeLessThan(MAX);
  }
  redis = await startRedis(redis.port);
  redisStopped = false;
  const fresh = await createKey(a, owner.accessToken);
  // Once both instances have reconnected, one count again: a hit on one is seen by the other.
  await eventually(
    async () => {
      const first = Number((await a.get('/api/v1/tenant', { token: fresh.key })).headers.get('x-ratelimit-remaining'));
      const second = Number((await b.get('/api/v1/tenant', { token: fresh.key })).headers.get('x-ratelimit-remaining'));
      return second === first - 1;
    },
    10_000,
    100,
  );
});
