import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { readSse } from '../helpers/sse';
import { startStack, type Stack } from '../helpers/stack';

// Billing through the gateway: the starting grant, purchases with Idempotency-Key, gift cards redeemed once, the
// operator API, plan changes reaching identity and regions, usage of model calls spending credits, and 402.
jest.setTimeout(60_000);

const ADMIN = 'operator-token-for-tests-0123456789';
let stack: Stack;
let api: Client;
let llm: FakeProviderServer;

beforeAll(async () => {
  llm = await startFakeOpenAI({ apiKey: 'sk-billing' });
  stack = await startStack({ env: { SVC_ADMIN_TOKEN: ADMIN, EGRESS_ALLOW_PRIVATE: 'true' } });
  api = client(stack.url);
});
afterAll(async () => {
  await stack.stop();
  await llm.close();
});

const admin = { token: ADMIN };
const balanceOf = async (a: Account) => (await api.get('/api/v1/billing/summary', { token: a.accessToken })).body.data.credits.balance;
async function tenant(name: string): Promise<Account> {
  const a = await signUp(api, name);
  await eventually(async () => (await balanceOf(a)) === 1000);
  return a;
}

it('grants 1,000 credits to a new tenant, on the free plan, with no invoices', async () => {
  const a = await tenant('Granted');
  const summary = (await api.get('/api/v1/billing/summary', { token: a.accessToken })).body.data;
  expect(summary).toMatchObject({ plan: 'free', subscription: null, credits: { balance: 1000 }, usage: { calls: 0, credits: 0 } });
  const invoices = await api.get('/api/v1/billing/invoices', { token: a.accessToken });
  expect(invoices.body).toMatchObject({ data: [], meta: { pagination: { has_more: false } } });
});

it('charges once for concurrent purchases with one Idempotency-Key: the other is in progress or the same answer', async () => {
  const a = await tenant('Buyer');
  const headers = { 'idempotency-key': 'buy-once-1' };
  const buy = () => api.post('/api/v1/billing/credits/purchase', { credits: 250 }, { token: a.accessToken, headers });
  const both = await Promise.all([buy(), buy()]);
  const one = both.find((r) => r.status === 200)!;
  expect(one).toBeDefined();
  for (const r of both.filter((x) => x !== one)) {
    if (r.status === 200) expect(r.body.data).toEqual(one.body.data);
    else expect(expectError(r, 409, 'CONFLICT').details.reason).toBe('idempotency_key_in_progress');
  }
  // A retry of the refused one gets that answer again.
  const two = await buy();
  expect([two.status, two.headers.get('idempotent-replayed')]).toEqual([200, 'true']);
  expect(two.body.data).toEqual(one.body.data);
  expect(one.body.data).toMatchObject({ provider: 'sandbox', status: 'succeeded', creditsAdded: 250, balance: 1250 });
  expect(await balanceOf(a)).toBe(1250);
  const list = (await api.get('/api/v1/billing/invoices', { token: a.accessToken })).body.data;
  expect(list).toHaveLength(1);
  expect(list[0]).toMatchObject({ kind: 'credits', credits: 250, status: 'paid', provider: 'sandbox' });
  // The same key with another body is refused; without a key every purchase is its own.
  const other = await api.post('/api/v1/billing/credits/purchase', { credits: 5 }, { token: a.accessToken, headers });
  expect(expectError(other, 422, 'UNPROCESSABLE_ENTITY').details.reason).toBe('idempotency_key_reused');
  expect((await api.post('/api/v1/billing/credits/purchase', { credits: 5 }, { token: a.accessToken })).body.data.balance).toBe(1255);
});

it('lets exactly one of 50 concurrent redemptions of a gift card win', async () => {
  const minted = await api.post('/api/v1/admin/gift-cards', { credits: 300, count: 2 }, admin);
  expect(minted.status).toBe(201);
  const [code, spare] = minted.body.data.codes as string[];
  const tenants = await Promise.all([1, 2, 3, 4, 5].map((i) => tenant(`Redeemer ${i}`)));
  const answers = await Promise.all(
    Array.from({ length: 50 }, (_, i) => api.post('/api/v1/billing/gift-cards/redeem', { code }, { token: tenants[i % 5].accessToken })),
  );
  expect(answers.filter((r) => r.status === 200)).toHaveLength(1);
  for (const r of answers.filter((x) => x.status !== 200))
    expect(expectError(r, 409, 'CONFLICT').details.reason).toBe('gift_card_redeemed');
  const balances = await Promise.all(tenants.map(balanceOf));
  expect(balances.sort()).toEqual([1000, 1000, 1000, 1000, 1300]);
  // Unknown codes are 404; codes are not case-sensitive.
  expectError(
    await api.post('/api/v1/billing/gift-cards/redeem', { code: 'GIFT-NOPE' }, { token: tenants[0].accessToken }),
    404,
    'RESOURCE_NOT_FOUND',
  );
  const lower = await api.post('/api/v1/billing/gift-cards/redeem', { code: spare.toLowerCase() }, { token: tenants[0].accessToken });
  expect(lower.body.data).toMatchObject({ creditsAdded: 300 });
});

it('answers the operator API with 401 for a wrong token and 403 for a tenant credential', async () => {
  const a = await tenant('Not operator');
  const body = { credits: 1, count: 1 };
  expectError(await api.post('/api/v1/admin/gift-cards', body, { token: 'wrong' }), 401, 'UNAUTHORIZED');
  expectError(await api.post('/api/v1/admin/gift-cards', body), 401, 'UNAUTHORIZED');
  expectError(await api.post('/api/v1/admin/gift-cards', body, { token: a.accessToken }), 403, 'FORBIDDEN');
  const { key } = await createKey(api, a.accessToken);
  expectError(await api.post('/api/v1/admin/gift-cards', body, { token: key }), 403, 'FORBIDDEN');
  expectError(await api.patch('/api/v1/admin/tenants/ten_nobody', { plan: 'growth' }, admin), 404, 'RESOURCE_NOT_FOUND');
});

it("sets a tenant's plan: identity's tenant and the regions' gate follow", async () => {
  const a = await tenant('Upgraded');
  const t = { token: a.accessToken };
  const check = () => api.get(`/api/v1/regions/features/${a.tenantId}/check/secondary_region`, t);
  expect((await check()).body.data.enabled).toBe(false);
  expect((await api.patch(`/api/v1/admin/tenants/${a.tenantId}`, { plan: 'growth' }, admin)).body.data).toEqual({
    tenantId: a.tenantId,
    plan: 'growth',
  });
  await eventually(async () => (await api.get('/api/v1/tenant', t)).body.data.plan === 'growth');
  await eventually(async () => (await check()).body.data.enabled === true);
  expect((await api.get('/api/v1/billing/summary', t)).body.data.plan).toBe('growth');
});

it('subscribes through the sandbox: an invoice, the plan, and the portal page', async () => {
  const a = await tenant('Subscriber');
  const t = { token: a.accessToken };
  const res = await api.post('/api/v1/billing/subscription/create', { plan: 'starter' }, t);
  expect(res.status).toBe(200);
  expect(res.body.data).toMatchObject({ provider: 'sandbox', status: 'succeeded', subscription: { plan: 'starter', status: 'active' } });
  await eventually(async () => (await api.get('/api/v1/tenant', t)).body.data.plan === 'starter');
  expectError(await api.post('/api/v1/billing/subscription/create', { plan: 'starter' }, t), 409, 'CONFLICT');
  expect((await api.post('/api/v1/billing/portal', undefined, t)).body.data.url).toMatch(/\/settings\/billing$/);
  // The sandbox takes no webhooks: without Stripe configured its endpoint names no provider.
  const hook = await api.request('POST', '/api/v1/billing/webhooks/stripe', {
    raw: '{"type":"checkout.session.completed"}',
    headers: { 'content-type': 'application/json', 'stripe-signature': 't=1,v1=00' },
  });
  expect(expectError(hook, 404, 'RESOURCE_NOT_FOUND').details).toMatchObject({ resource: 'payment_provider' });
});

it('holds billing POSTs to billing:write and the owner/admin role; reads need only a credential', async () => {
  const a = await tenant('Scoped');
  const { key } = await createKey(api, a.accessToken, { scopes: ['projects:read'] });
  expect((await api.get('/api/v1/billing/summary', { token: key })).status).toBe(200);
  expectError(await api.post('/api/v1/billing/credits/purchase', { credits: 1 }, { token: key }), 403, 'FORBIDDEN');
  const writer = await createKey(api, a.accessToken, { scopes: ['billing:write'] });
  expect((await api.post('/api/v1/billing/credits/purchase', { credits: 1 }, { token: writer.key })).status).toBe(200);
});

it('spends credits on model calls, shows usage per model and per key, and answers 402 at a balance of 0 after validation', async () => {
  const a = await tenant('Spender');
  const t = { token: a.accessToken };
  const session = (await api.post('/api/v1/chat/sessions', { title: 'billed' }, t)).body.data.id;
  // Validation first: without LLM settings the answer is 400 llm_not_configured, whatever the balance.
  expect(
    (await api.post(`/api/v1/admin/tenants/${a.tenantId}/credits`, { delta: -1000, reason: 'test: empty the balance' }, admin)).body.data,
  ).toEqual({ balance: 0 });
  const unconfigured = await api.post(`/api/v1/chat/sessions/${session}/messages`, { content: 'hi' }, t);
  expect(expectError(unconfigured, 400, 'VALIDATION_ERROR').details.reason).toBe('llm_not_configured');
  await api.patch('/api/v1/tenant/settings/llm', { provider: 'openai', model: 'gpt-fake', baseUrl: llm.url, apiKey: 'sk-billing' }, t);
  expectError(await api.post(`/api/v1/chat/sessions/${session}/messages`, { content: 'hi' }, t), 402, 'INSUFFICIENT_CREDITS');
  const agent = (await api.post('/api/v1/agents', { name: 'a', systemPrompt: 'p', config: { autonomyLevel: 'manual' } }, t)).body.data.id;
  const project = (await api.post('/api/v1/projects', { name: 'p' }, t)).body.data.id;
  expectError(await api.post(`/api/v1/agents/${agent}/execute`, { goal: 'g', projectId: project }, t), 402, 'INSUFFICIENT_CREDITS');

  // Credits back: a reply is billed 1 credit (a small call), by model and by the key that sent it.
  expect((await api.post(`/api/v1/admin/tenants/${a.tenantId}/credits`, { delta: 10, reason: 'test: top up' }, admin)).body.data).toEqual({
    balance: 10,
  });
  const { key, id: keyId } = await createKey(api, a.accessToken);
  expect((await api.post(`/api/v1/chat/sessions/${session}/messages`, { content: 'hello there' }, { token: key })).status).toBe(202);
  await eventually(async () => (await balanceOf(a)) === 9);
  const usage = (await api.get('/api/v1/billing/summary', t)).body.data.usage;
  expect(usage).toMatchObject({ calls: 1, credits: 1, byModel: [{ key: 'gpt-fake', calls: 1, credits: 1 }] });
  expect(usage.byCredential).toEqual([expect.objectContaining({ key: keyId, kind: 'api_key', calls: 1, credits: 1 })]);
});

it('bills a chat reply whose reader hung up mid-stream, and the model call of an agent run cancelled mid-call', async () => {
  const a = await tenant('Cut off');
  const t = { token: a.accessToken };
  await api.patch('/api/v1/tenant/settings/llm', { provider: 'openai', model: 'gpt-cut', baseUrl: llm.url, apiKey: 'sk-billing' }, t);
  const usageOfModel = async () =>
    ((await api.get('/api/v1/billing/summary', t)).body.data.usage.byModel as Array<{ key: string; calls: number; credits: number }>).find(
      (l) => l.key === 'gpt-cut',
    );

  // Chat: 1,500 tokens reported at the end (2 credits); the reader leaves after the first delta.
  llm.script({ type: 'text', text: 'a slow reply '.repeat(10), chunks: 20, delayMs: 20, usage: { inputTokens: 1000, outputTokens: 500 } });
  const session = (await api.post('/api/v1/chat/sessions', { title: 'hung up' }, t)).body.data.id;
  expect((await api.post(`/api/v1/chat/sessions/${session}/messages`, { content: 'go' }, t)).status).toBe(202);
  const read = await readSse(`${stack.url}/api/v1/chat/sessions/${session}/stream`, {
    token: a.accessToken,
    stopAfter: (events) => events.some((e) => e.event === 'message.delta'),
  });
  expect(read.hungUp).toBe(true);
  await eventually(async () => (await usageOfModel())?.calls === 1);
  expect(await usageOfModel()).toMatchObject({ calls: 1, credits: 2 });
  expect(await balanceOf(a)).toBe(998);

  // Agent run: a long reply whose usage would come at its end; the run is cancelled while it streams. The call
  // is billed for what streamed, estimated (4 characters a token), at least 1 credit.
  const requestsBefore = llm.requests.length;
  llm.script({ type: 'text', text: 'word '.repeat(400), chunks: 400, delayMs: 10, usage: { inputTokens: 9000, outputTokens: 9000 } });
  const agent = (await api.post('/api/v1/agents', { name: 'cut', systemPrompt: 'p', config: { autonomyLevel: 'manual' } }, t)).body.data.id;
  const project = (await api.post('/api/v1/projects', { name: 'p' }, t)).body.data.id;
  const run = (await api.post(`/api/v1/agents/${agent}/execute`, { goal: 'g', projectId: project }, t)).body.data;
  await eventually(async () => llm.requests.length > requestsBefore);
  await new Promise((r) => setTimeout(r, 500)); // let part of the reply stream
  expect((await api.post(`/api/v1/agents/${agent}/runs/${run.id}/cancel`, undefined, t)).body.data.status).toBe('cancelled');
  await eventually(async () => (await usageOfModel())?.calls === 2, 15_000);
  const line = (await usageOfModel())!;
  // Not the 18 credits the full reply would have reported; more than nothing.
  expect(line.credits - 2).toBeGreaterThanOrEqual(1);
  expect(line.credits - 2).toBeLessThan(18);
  expect(await balanceOf(a)).toBe(1000 - line.credits);
});

it('answers 404 on the operator routes when SVC_ADMIN_TOKEN is unset', async () => {
  const plain = await startStack();
  try {
    const res = await client(plain.url).post('/api/v1/admin/gift-cards', { credits: 1, count: 1 }, admin);
    expectError(res, 404, 'RESOURCE_NOT_FOUND');
  } finally {
    await plain.stop();
  }
});
