import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startRedis } from '../helpers/redis';
import { startStack, type Stack } from '../helpers/stack';

// Per-key limits, PATCH and rotation (CONTRACT.md 8) through two gateways sharing a real Redis. Polling is at
// its slowest (1 s), so the one-second guarantees hold because changes are pushed, not because of the poll.
let redis: Awaited<ReturnType<typeof startRedis>>;
let stack: Stack;
let a: Client;
let b: Client;
let owner: Account;
const K = '/api/v1/api-keys';

beforeAll(async () => {
  redis = await startRedis();
  stack = await startStack({ gateways: 2, env: { REDIS_URL: redis.url, RATE_LIMIT_MAX: '1000', REVOCATION_POLL_MS: '1000' } });
  a = client(stack.gateways[0].url);
  b = client(stack.gateways[1].url);
  owner = await signUp(a, 'Limits');
});
afterAll(async () => {
  await stack.stop();
  await redis.stop();
});

/** Rate windows are fixed 60 s windows on the epoch: a burst is kept inside one of them. */
async function awayFromWindowEdge(): Promise<void> {
  const intoWindow = Date.now() % 60_000;
  if (intoWindow > 50_000) await new Promise((r) => setTimeout(r, 60_000 - intoWindow + 200));
}

const keyView = async (id: string) => {
  const res = await a.get(`${K}/${id}`, { token: owner.accessToken });
  expect(res.status).toBe(200);
  return res.body.data;
};

describe('requestsPerMinute', () => {
  it('admits exactly the limit across two gateways; the rest get 429 with Retry-After, and are not counted', async () => {
    const { key, id } = await createKey(a, owner.accessToken, { limits: { requestsPerMinute: 10 } });
    await awayFromWindowEdge();
    const results = await Promise.all(Array.from({ length: 30 }, (_, i) => (i % 2 ? b : a).get('/api/v1/tenant', { token: key })));
    const ok = results.filter((r) => r.status === 200);
    const refused = results.filter((r) => r.status === 429);
    expect({ ok: ok.length, refused: refused.length }).toEqual({ ok: 10, refused: 20 });
    for (const r of refused) {
      expectError(r, 429, 'RATE_LIMIT_EXCEEDED');
      const retry = Number(r.headers.get('retry-after'));
      expect(retry).toBeGreaterThanOrEqual(1);
      expect(retry).toBeLessThanOrEqual(60);
    }
    for (const r of ok) expect(r.headers.get('x-ratelimit-limit')).toBe('10');
    // Refused requests did not count: the view shows the 10 admitted.
    const view = await keyView(id);
    expect(view.limits).toEqual({ requestsPerMinute: 10 });
    expect(view.usage).toEqual({ requestsThisMinute: 10, tokensThisMinute: 0, creditsThisPeriod: 0 });
  });
});

describe('PATCH /api-keys/:id', () => {
  it('merges limits field by field, removes one with null, and answers the key view', async () => {
    const { id } = await createKey(a, owner.accessToken, { limits: { requestsPerMinute: 5, concurrency: 2 } });
    let res = await a.patch(
      `${K}/${id}`,
      { limits: { tokensPerMinute: 1000, creditBudget: { credits: 50, period: 'month' } } },
      { token: owner.accessToken },
    );
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({
      id,
      name: 'test key',
      limits: { requestsPerMinute: 5, concurrency: 2, tokensPerMinute: 1000, creditBudget: { credits: 50, period: 'month' } },
      usage: { requestsThisMinute: 0, tokensThisMinute: 0, creditsThisPeriod: 0 },
    });
    res = await a.patch(
      `${K}/${id}`,
      { name: 'renamed', limits: { concurrency: null, creditBudget: null, requestsPerMinute: 7 } },
      { token: owner.accessToken },
    );
    expect(res.status).toBe(200);
    expect(res.body.data.name).toBe('renamed');
    // A removed limit is absent, not null.
    expect(res.body.data.limits).toEqual({ requestsPerMinute: 7, tokensPerMinute: 1000 });
    expect((await keyView(id)).limits).toEqual({ requestsPerMinute: 7, tokensPerMinute: 1000 });
    expect((await a.get(K, { token: owner.accessToken })).body.data.find((k: any) => k.id === id).limits).toEqual({
      requestsPerMinute: 7,
      tokensPerMinute: 1000,
    });
  });

  it('takes effect within one second on the other gateway', async () => {
    const { key, id } = await createKey(a, owner.accessToken, { limits: { requestsPerMinute: 2 } });
    await awayFromWindowEdge();
    expect((await b.get('/api/v1/tenant', { token: key })).status).toBe(200);
    expect((await b.get('/api/v1/tenant', { token: key })).status).toBe(200);
    expectError(await b.get('/api/v1/tenant', { token: key }), 429, 'RATE_LIMIT_EXCEEDED');

    expect((await a.patch(`${K}/${id}`, { limits: { requestsPerMinute: 4 } }, { token: owner.accessToken })).status).toBe(200);
    // b knew the key (cached principal with limit 2): the change reaches it within a second.
    const took = await eventually(async () => (await b.get('/api/v1/tenant', { token: key })).status === 200, 1000, 20);
    expect(took).toBeLessThanOrEqual(1000);
    const res = await b.get('/api/v1/tenant', { token: key });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-ratelimit-limit')).toBe('4');
    expectError(await b.get('/api/v1/tenant', { token: key }), 429, 'RATE_LIMIT_EXCEEDED');

    // Removed: the principal limit (RATE_LIMIT_MAX) applies again.
    expect((await a.patch(`${K}/${id}`, { limits: { requestsPerMinute: null } }, { token: owner.accessToken })).status).toBe(200);
    await eventually(async () => (await b.get('/api/v1/tenant', { token: key })).headers.get('x-ratelimit-limit') === '1000', 1000, 20);
  });

  it('refuses unknown fields and bad values with 400 and details.fields', async () => {
    const { id } = await createKey(a, owner.accessToken);
    const bad: Array<[unknown, string]> = [
      [{ limits: { requestsPerMinute: 0 } }, 'limits.requestsPerMinute'],
      [{ limits: { concurrency: 1.5 } }, 'limits.concurrency'],
      [{ limits: { tokensPerMinute: 'many' } }, 'limits.tokensPerMinute'],
      [{ limits: { creditBudget: { credits: 10, period: 'week' } } }, 'limits.creditBudget.period'],
      [{ limits: { creditBudget: { credits: 10 } } }, 'limits.creditBudget.period'],
      [{ limits: { burst: 3 } }, 'limits.burst'],
      [{ owner: 'me' }, 'owner'],
      [{ name: '' }, 'name'],
    ];
    for (const [body, field] of bad) {
      const err = expectError(await a.patch(`${K}/${id}`, body, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
      expect(err.details.fields.map((f: any) => f.field)).toContain(field);
    }
    const err = expectError(
      await a.post(
        K,
        { name: 'x', type: 'sdk', environment: 'development', limits: { requestsPerMinute: -1 } },
        { token: owner.accessToken },
      ),
      400,
      'VALIDATION_ERROR',
    );
    expect(err.details.fields.map((f: any) => f.field)).toContain('limits.requestsPerMinute');
  });

  it("answers 404 for another tenant's key, and for an unknown one", async () => {
    const { id } = await createKey(a, owner.accessToken);
    const other = await signUp(a, 'Other');
    expectError(await a.patch(`${K}/${id}`, { limits: { requestsPerMinute: 1 } }, { token: other.accessToken }), 404, 'RESOURCE_NOT_FOUND');
    expectError(await a.post(`${K}/${id}/rotate`, {}, { token: other.accessToken }), 404, 'RESOURCE_NOT_FOUND');
    expectError(await a.patch(`${K}/key_unknown`, { name: 'x' }, { token: owner.accessToken }), 404, 'RESOURCE_NOT_FOUND');
    expect((await keyView(id)).limits).toEqual({});
  });
});

describe('POST /api-keys/:id/rotate', () => {
  it('gives a new secret at once and keeps the old one for the grace period, then refuses it within a second', async () => {
    const { key: old, id } = await createKey(a, owner.accessToken);
    // Both gateways know the old secret (cached principals).
    for (const gw of [a, b]) expect((await gw.get('/api/v1/tenant', { token: old })).status).toBe(200);
    const res = await a.post(`${K}/${id}/rotate`, { gracePeriodSeconds: 2 }, { token: owner.accessToken });
    const answeredAt = Date.now();
    expect(res.status).toBe(201);
    const fresh: string = res.body.data.key;
    expect(res.body.data.id).toBe(id);
    expect(fresh).not.toBe(old);
    expect(res.body.data.start).toBe(fresh.slice(0, 12));
    for (const gw of [a, b]) {
      expect((await gw.get('/api/v1/tenant', { token: fresh })).status).toBe(200);
      expect((await gw.get('/api/v1/tenant', { token: old })).status).toBe(200);
    }
    // The grace period ends at most 2 s after the answer: from then on the old secret is refused everywhere.
    await new Promise((r) => setTimeout(r, Math.max(0, answeredAt + 2000 - Date.now())));
    const took = await eventually(
      async () =>
        (await a.get('/api/v1/tenant', { token: old })).status === 401 && (await b.get('/api/v1/tenant', { token: old })).status === 401,
      1000,
      20,
    );
    expect(took).toBeLessThanOrEqual(1000);
    for (const gw of [a, b]) {
      expectError(await gw.get('/api/v1/tenant', { token: old }), 401, 'UNAUTHORIZED');
      expect((await gw.get('/api/v1/tenant', { token: fresh })).status).toBe(200);
    }
  });

  it('with no grace period refuses the old secret at once on every gateway', async () => {
    const { key: old, id } = await createKey(a, owner.accessToken);
    for (const gw of [a, b]) expect((await gw.get('/api/v1/tenant', { token: old })).status).toBe(200);
    const res = await a.post(`${K}/${id}/rotate`, undefined, { token: owner.accessToken });
    expect(res.status).toBe(201);
    expectError(await a.get('/api/v1/tenant', { token: old }), 401, 'UNAUTHORIZED');
    await eventually(async () => (await b.get('/api/v1/tenant', { token: old })).status === 401, 1000, 20);
    expect((await b.get('/api/v1/tenant', { token: res.body.data.key })).status).toBe(200);
  });

  it('refuses a grace period out of range', async () => {
    const { id } = await createKey(a, owner.accessToken);
    for (const gracePeriodSeconds of [-1, 86_401, 1.5, '10'])
      expect(
        expectError(await a.post(`${K}/${id}/rotate`, { gracePeriodSeconds }, { token: owner.accessToken }), 400, 'VALIDATION_ERROR')
          .details.fields[0].field,
      ).toBe('gracePeriodSeconds');
    expect((await a.post(`${K}/${id}/rotate`, { gracePeriodSeconds: 86_400 }, { token: owner.accessToken })).status).toBe(201);
  });
});
