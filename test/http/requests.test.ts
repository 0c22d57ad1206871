/**
 * The request log and per-model prices over HTTP (CONTRACT.md 12, issue 31): model calls through the gateway's
 * pass-through and REST chat to a fake provider, and priced calls recorded with billing's RecordUsage as the
 * gateway's pass-through records them, each appear once in `GET /requests` with the credits the ledger debited;
 * the filters, pages, another tenant and bad query values.
 */
import { createClient } from '@svc/kit';
import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { billingV1, identityV1, type eventsV1 } from '@svc/proto';
import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

jest.setTimeout(90_000);

const TENANT_KEY = 'sk-tenant-requests-' + 'r'.repeat(32);
let stack: Stack;
let api: Client;
let openai: FakeProviderServer;
let owner: Account;
let passKey: { key: string; id: string };
let rpc: ReturnType<typeof createClient<typeof billingV1.BillingServiceService>>;
/** The key's service token, as the gateway holds it for the key's calls to billing. */
let keyToken: string;

beforeAll(async () => {
  openai = await startFakeOpenAI({ apiKey: TENANT_KEY });
  stack = await startStack({ env: { EGRESS_ALLOW_PRIVATE: 'true' } });
  api = client(stack.url);
  owner = await signUp(api, 'Requests');
  const saved = await api.patch(
    '/api/v1/tenant/settings/llm',
    { provider: 'openai', model: 'gpt-chat', baseUrl: openai.url, apiKey: TENANT_KEY },
    { token: owner.accessToken },
  );
  expect(saved.status).toBe(200);
  passKey = await createKey(api, owner.accessToken, { scopes: ['llm:passthrough'] });
  rpc = createClient(billingV1.BillingServiceService, stack.env.BILLING_ADDR!, { deadlineMs: 10_000 });
  const identity = createClient(identityV1.IdentityServiceService, stack.env.IDENTITY_ADDR!, { deadlineMs: 10_000 });
  keyToken = (await identity.authenticate({ credential: passKey.key }, {})).principal!.serviceToken;
  identity.close();
  await eventually(async () => (await balance(owner)) === 1000);
});
afterAll(async () => {
  rpc.close();
  await stack.stop();
  await openai.close();
});

const t = () => ({ token: owner.accessToken });
const balance = async (a: Account) => (await api.get('/api/v1/billing/summary', { token: a.accessToken })).body.data.credits.balance;
const requests = async (query = '', a: Account = owner) => {
  const res = await api.get(`/api/v1/requests${query}`, { token: a.accessToken });
  expect(res.status).toBe(200);
  return res.body.data as Array<Record<string, any>>;
};
/** Every entry of a query, following the cursor one entry a page. */
async function allPages(query: string): Promise<Array<Record<string, any>>> {
  const out: Array<Record<string, any>> = [];
  let cursor: string | undefined;
  do {
    const sep = query ? '&' : '?';
    const res = await api.get(`/api/v1/requests${query}${sep}limit=1${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, t());
    expect(res.status).toBe(200);
    expect(res.body.data.length).toBeLessThanOrEqual(1);
    out.push(...res.body.data);
    cursor = res.body.meta.pagination.has_more ? res.body.meta.pagination.next_cursor : undefined;
  } while (cursor);
  return out;
}

const PRICES: Record<string, eventsV1.ModelPrice> = {
  small: { input: 150, output: 600, cachedInput: 75, source: 'entry' },
  strong: { input: 7500, output: 30000, cachedInput: 3750, source: 'entry' },
  listed: { input: 2500, output: 10000, cachedInput: 1250, source: 'platform' },
};
const formula = (p: eventsV1.ModelPrice, input: number, output: number, cached: number) =>
  Math.ceil(((input - cached) * p.input + output * p.output + cached * p.cachedInput) / 1e6);

it('logs each call once with the ledger debit, prices each model, and usage by model sums to the ledger', async () => {
  const before = await balance(owner);
  // Two pass-through calls and a REST chat reply, to the fake provider.
  for (const input of ['alpha beta', 'gamma delta epsilon'])
    expect((await api.post('/v1/passthrough/openai/embeddings', { model: 'embed-x', input }, { token: passKey.key })).status).toBe(200);
  const session = (await api.post('/api/v1/chat/sessions', { title: 'logged' }, t())).body.data.id;
  expect((await api.post(`/api/v1/chat/sessions/${session}/messages`, { content: 'hello there' }, t())).status).toBe(202);
  await eventually(async () => (await requests()).length === 3, 15_000);

  // Priced calls as the gateway's pass-through records them (billing's RecordUsage, with the key's credential).
  const priced: Array<[string, number, number, number]> = [
    ['small', 40_000, 9_000, 0],
    ['strong', 3_000, 1_500, 1_000],
    ['listed', 12_345, 678, 2_000],
    ['strong', 100, 10, 0],
  ];
  for (const [i, [model, input, output, cached]] of priced.entries()) {
    const call = {
      origin: 'v1',
      requestId: `req_priced_${i}`,
      endUser: 'customer-42',
      status: 'ok',
      errorCode: '',
      latencyMs: 250 + i,
      ttftMs: 40,
      entryId: `mdl_${model}`,
      servedModel: `${model}-upstream`,
      userId: '',
    };
    const res = await rpc.recordUsage(
      {
        callId: `priced_${i}`,
        provider: 'openai',
        model,
        inputTokens: input,
        outputTokens: output,
        cachedInputTokens: cached,
        source: 'passthrough',
        sourceId: `req_priced_${i}`,
        price: PRICES[model],
        call,
      },
      { token: keyToken },
    );
    expect(res.credits).toBe(formula(PRICES[model], input, output, cached));
  }
  // A call that failed before any token, with its reservation: released, logged with 0 credits.
  await rpc.reserve(
    {
      callId: 'failed_0',
      tokens: 0,
      source: 'passthrough',
      sourceId: 'r',
      ttlMs: 60_000,
      price: PRICES.small,
      inputTokens: 100,
      outputTokens: 100,
    },
    { token: keyToken },
  );
  await rpc.recordUsage(
    {
      callId: 'failed_0',
      provider: 'openai',
      model: 'small',
      inputTokens: 0,
      outputTokens: 0,
      source: 'passthrough',
      sourceId: 'r',
      call: {
        origin: 'passthrough',
        requestId: 'req_failed',
        endUser: '',
        status: 'error',
        errorCode: 'upstream_error',
        latencyMs: 9,
        ttftMs: 0,
        entryId: '',
        servedModel: '',
        userId: '',
      },
    },
    { token: keyToken },
  );

  const entries = await requests('?limit=100');
  expect(entries).toHaveLength(3 + priced.length + 1);
  // Newest first; each call once.
  expect(entries.map((e) => e.at)).toEqual([...entries.map((e) => e.at)].sort().reverse());
  expect(new Set(entries.map((e) => e.id)).size).toBe(entries.length);
  const spent = before - (await balance(owner));
  expect(entries.reduce((n, e) => n + e.credits, 0)).toBe(spent);

  expect(entries.filter((e) => e.source === 'passthrough' && e.model === 'embed-x')).toHaveLength(2);
  const chat = entries.find((e) => e.source === 'chat')!;
  expect(chat).toMatchObject({ model: 'gpt-chat', provider: 'openai', status: 'ok', apiKeyId: null, credits: 1 });
  expect(chat.inputTokens).toBeGreaterThan(0);
  const strong = entries.filter((e) => e.model === 'strong');
  expect(strong.map((e) => e.credits).sort((a, b) => a - b)).toEqual([
    formula(PRICES.strong, 100, 10, 0),
    formula(PRICES.strong, 3000, 1500, 1000),
  ]);
  expect(strong[0]).toMatchObject({
    source: 'v1',
    servedModel: 'strong-upstream',
    endUser: 'customer-42',
    apiKeyId: passKey.id,
    status: 'ok',
    ttftMs: 40,
  });
  const failed = entries.find((e) => e.status === 'error')!;
  expect(failed).toMatchObject({ source: 'passthrough', model: 'small', credits: 0, errorCode: 'upstream_error', requestId: 'req_failed' });
  expect((await api.get('/api/v1/billing/summary', t())).body.data.credits.reserved).toBe(0);
  // One entry by id; no prompt or answer anywhere.
  expect((await api.get(`/api/v1/requests/${chat.id}`, t())).body.data).toEqual(chat);
  expect(JSON.stringify(entries)).not.toMatch(/hello there|alpha beta/);

  // Usage by model names the model as asked (no provider prefix) and sums to the ledger.
  const from = new Date(Date.now() - 3_600_000).toISOString();
  const to = new Date(Date.now() + 3_600_000).toISOString();
  const rows = (await api.get(`/api/v1/billing/usage?from=${from}&to=${to}&groupBy=model`, t())).body.data as Array<Record<string, any>>;
  expect(rows.reduce((n, r) => n + r.credits, 0)).toBe(spent);
  for (const model of ['small', 'strong', 'listed', 'embed-x', 'gpt-chat'])
    expect(rows.filter((r) => r.model === model).reduce((n, r) => n + r.credits, 0)).toBe(
      entries.filter((e) => e.model === model).reduce((n, e) => n + e.credits, 0),
    );
});

it('filters by model, key, source, status and time, pages by cursor, and answers 400 to bad values', async () => {
  await eventually(async () => (await requests('?limit=100')).length >= 8, 15_000);
  const every = await requests('?limit=100');
  for (const [query, keep] of [
    ['?model=strong', (e: Record<string, any>) => e.model === 'strong'],
    [`?apiKeyId=${passKey.id}`, (e: Record<string, any>) => e.apiKeyId === passKey.id],
    ['?source=chat', (e: Record<string, any>) => e.source === 'chat'],
    ['?status=error', (e: Record<string, any>) => e.status === 'error'],
    ['?source=passthrough&status=ok', (e: Record<string, any>) => e.source === 'passthrough' && e.status === 'ok'],
    [
      `?from=${encodeURIComponent(every[2].at)}&to=${encodeURIComponent(every[0].at)}`,
      (e: Record<string, any>) => e.at >= every[2].at && e.at < every[0].at,
    ],
  ] as const) {
    const expected = every.filter(keep).map((e) => e.id);
    expect(expected.length).toBeGreaterThan(0);
    expect((await allPages(query)).map((e) => e.id)).toEqual(expected);
  }
  expect((await allPages('')).map((e) => e.id)).toEqual(every.map((e) => e.id));
  expect(await requests('?model=nothing-like-it')).toEqual([]);

  for (const bad of [
    'from=yesterday',
    'to=2025-13-45',
    'source=email',
    'status=done',
    'limit=0',
    'limit=101',
    'cursor=not-a-cursor',
    'from=2025-02-01&to=2025-01-01',
  ])
    expectError(await api.get(`/api/v1/requests?${bad}`, t()), 400, 'VALIDATION_ERROR');
  // A key without billing:read reads nothing.
  expectError(await api.get('/api/v1/requests', { token: passKey.key }), 403, 'FORBIDDEN');
});

it("shows another tenant none of this tenant's calls", async () => {
  const other = await signUp(api, 'Requests other');
  const mine = await requests('?limit=1');
  expect(mine).toHaveLength(1);
  expect(await requests('', other)).toEqual([]);
  expectError(await api.get(`/api/v1/requests/${mine[0].id}`, { token: other.accessToken }), 404, 'RESOURCE_NOT_FOUND');
  expectError(await api.get('/api/v1/requests/call_missing', t()), 404, 'RESOURCE_NOT_FOUND');
});
