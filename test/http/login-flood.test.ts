import { client, signUp, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// A flood of wrong passwords (no credential needed) must not take sign-in or logout down for everyone else
// (issue 8): password hashing is bounded and throttled per address, so the real user signs in, refreshes and logs
// out while it lasts, and only the contract's 429/503 answer the flood.
jest.setTimeout(60_000);

let stack: Stack;
let api: Client;

beforeAll(async () => {
  // The gateway believes X-Forwarded-For from loopback, so each test client can speak for its own address.
  // At the production cost (PASSWORD_HASH_COST 15, not the test systems' 10): the flood must fill the hash gate.
  stack = await startStack({ env: { TRUST_PROXY: '127.0.0.1', PASSWORD_HASH_COST: '15' } });
  api = client(stack.url);
});
afterAll(() => stack.stop());

const from = (ip: string) => ({ headers: { 'x-forwarded-for': ip } });

it('lets a real user sign in, refresh and log out during a flood of wrong passwords', async () => {
  const user = await signUp(api, 'Flooded');
  const attackers = ['203.0.113.1', '203.0.113.2', '203.0.113.3'];
  const statuses: Record<number, number> = {};
  const flood = Promise.all(
    Array.from({ length: 200 }, async (_, i) => {
      const target = i % 2 ? user.email : `nobody${i}@example.com`;
      const res = await api.post('/api/v1/auth/login', { email: target, password: `wrong password ${i}` }, from(attackers[i % 3]));
      statuses[res.status] = (statuses[res.status] ?? 0) + 1;
      if (res.status === 429 || res.status === 503) expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
      return res.status;
    }),
  );

  // The user's client behaves as the SDK does: a 503 with Retry-After is tried again after that long (a few times).
  const t0 = Date.now();
  let login = await api.post('/api/v1/auth/login', { email: user.email, password: user.password }, from('198.51.100.10'));
  for (let i = 0; login.status === 503 && i < 3; i++) {
    await new Promise((r) => setTimeout(r, Number(login.headers.get('retry-after')) * 1000));
    login = await api.post('/api/v1/auth/login', { email: user.email, password: user.password }, from('198.51.100.10'));
  }
  const loginMs = Date.now() - t0;
  expect(login.status).toBe(200);
  const refreshed = await api.post('/api/v1/auth/refresh', { refreshToken: login.body.data.refreshToken }, from('198.51.100.10'));
  expect(refreshed.status).toBe(200);
  const token = refreshed.body.data.accessToken;
  expect((await api.get('/api/v1/auth/me', { token })).status).toBe(200);
  expect((await api.post('/api/v1/auth/logout', undefined, { token })).status).toBe(200);
  const loggedOutAt = Date.now();
  let me = await api.get('/api/v1/auth/me', { token });
  while (me.status === 200 && Date.now() - loggedOutAt < 1500) {
    await new Promise((r) => setTimeout(r, 50));
    me = await api.get('/api/v1/auth/me', { token });
  }
  expect(me.status).toBe(401);
  expect(Date.now() - loggedOutAt).toBeLessThan(1000);

  await flood;
  // Only wrong-password answers and the contract's refusals: never a 5xx other than 503, never a timeout.
  expect(Object.keys(statuses).map(Number).sort()).toEqual(expect.arrayContaining([401]));
  for (const status of Object.keys(statuses).map(Number)) expect([401, 429, 503]).toContain(status);
  // Most of the flood was refused before any hashing.
  expect((statuses[429] ?? 0) + (statuses[503] ?? 0)).toBeGreaterThan(100);
  console.info(`login during the flood took ${loginMs} ms; flood answers ${JSON.stringify(statuses)}`);
  // The attacker's addresses are throttled; the user, from their own address, still signs in afterwards.
  expect((await api.post('/api/v1/auth/login', { email: user.email, password: user.password }, from(attackers[0]))).status).toBe(429);
  expect((await api.post('/api/v1/auth/login', { email: user.email, password: user.password }, from('198.51.100.10'))).status).toBe(200);
});
