import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startReceiver, verifyByHand, type Received, type Receiver } from '../helpers/receiver';
import { startStack, type Stack } from '../helpers/stack';

// Billing alerts (CONTRACT.md 8): GET|PUT /billing/alerts, and one signed webhook delivery of
// billing.threshold_crossed per crossing. Priced so the sums are plain: 100 credits per 1,000 tokens, every chat
// reply holds its prompt plus 100 tokens (about 11 credits) and the provider reports 90 tokens (9 credits).
jest.setTimeout(60_000);

const ADMIN = 'operator-token-for-tests-0123456789';
const SECRET = 'whsec-alerts-secret';
const A = '/api/v1/billing/alerts';
const S = '/api/v1/chat/sessions';
let stack: Stack;
let api: Client;
let openai: FakeProviderServer;
let receiver: Receiver;

beforeAll(async () => {
  openai = await startFakeOpenAI();
  openai.setDefault(() => ({ type: 'text', text: 'fine', chunks: 2, usage: { inputTokens: 50, outputTokens: 40 } }));
  [stack, receiver] = await Promise.all([
    startStack({
      env: {
        SVC_ADMIN_TOKEN: ADMIN,
        EGRESS_ALLOW_PRIVATE: 'true',
        CHAT_DRAIN_MS: '0',
        CREDITS_PER_1K_TOKENS: '100',
        LLM_MAX_TOKENS: '100',
        WEBHOOK_RETRY_SCHEDULE: '0.2,0.2',
      },
    }),
    startReceiver(),
  ]);
  api = client(stack.url);
});
afterAll(async () => {
  await receiver.close();
  await stack.stop();
  await openai.close();
});

const balanceOf = async (a: Account) => (await api.get('/api/v1/billing/summary', { token: a.accessToken })).body.data.credits;

/** A tenant with its starting grant (1,000) in, its model settings pointing at the fake, and a webhook at `path`. */
async function tenant(name: string, path: string): Promise<Account> {
  const a = await signUp(api, name);
  await eventually(async () => (await balanceOf(a)).balance === 1000, 10_000);
  const llm = { provider: 'openai', baseUrl: openai.url, model: 'gpt-test', apiKey: 'sk-tenant-openai-' + 'c'.repeat(32) };
  expect((await api.patch('/api/v1/tenant/settings/llm', llm, { token: a.accessToken })).status).toBe(200);
  const hook = await api.post(
    '/api/v1/webhooks',
    { url: `${receiver.url}${path}`, events: ['billing.threshold_crossed'], secret: SECRET },
    { token: a.accessToken },
  );
  expect(hook.status).toBe(201);
  return a;
}

async function putAlerts(a: Account, body: Record<string, unknown>) {
  const res = await api.put(A, body, { token: a.accessToken });
  expect(res.status).toBe(200);
  return res.body.data;
}

async function adjust(a: Account, delta: number): Promise<number> {
  const res = await api.post(`/api/v1/admin/tenants/${a.tenantId}/credits`, { delta, reason: 'test: move the balance' }, { token: ADMIN });
  expect(res.status).toBe(200);
  return res.body.data.balance;
}

/** One chat reply, waited for until its reservation is settled by its usage. */
async function chat(token: string, owner: Account): Promise<void> {
  const session = (await api.post(S, {}, { token })).body.data.id as string;
  expect((await api.post(`${S}/${session}/messages`, { content: 'hi' }, { token })).status).toBe(202);
  await eventually(async () => (await balanceOf(owner)).reserved === 0, 15_000, 100);
}

/** The deliveries at `path`, each checked: signed with the registration's secret, of the alert type. */
function deliveries(path: string): Received[] {
  const got = receiver.at(path);
  for (const r of got) {
    expect(verifyByHand(r, SECRET)).toBe(true);
    expect(r.json.type).toBe('billing.threshold_crossed');
  }
  return got;
}

/** Waits for `count` deliveries at `path`, then a moment more, so that one too many would show. */
async function settledDeliveries(path: string, count: number): Promise<Array<Record<string, unknown>>> {
  await eventually(async () => receiver.at(path).length >= count, 15_000, 50);
  await new Promise((r) => setTimeout(r, 1500));
  return deliveries(path).map((r) => r.json.data);
}

it('a balance falling below the threshold gives one signed delivery; further down none; back up re-arms it', async () => {
  const owner = await tenant('Balance alerts', '/balance');
  expect(await putAlerts(owner, { balanceBelow: 500 })).toEqual({ balanceBelow: 500 });
  expect((await api.get(A, { token: owner.accessToken })).body.data).toEqual({ balanceBelow: 500 });

  expect(await adjust(owner, -400)).toBe(600); // still above
  expect(await adjust(owner, -150)).toBe(450); // crossed
  expect(await settledDeliveries('/balance', 1)).toEqual([{ kind: 'balance_below', threshold: 500, value: 450 }]);
  expect(await adjust(owner, -50)).toBe(400); // further down: nothing
  expect(await adjust(owner, 200)).toBe(600); // back up: nothing, re-armed
  expect(await adjust(owner, -100)).toBe(500); // at the threshold is not below it
  expect(await adjust(owner, -101)).toBe(399); // crossed again
  const all = await settledDeliveries('/balance', 2);
  expect(all).toEqual([
    { kind: 'balance_below', threshold: 500, value: 450 },
    { kind: 'balance_below', threshold: 500, value: 399 },
  ]);
  // Each delivery is its own event.
  expect(new Set(receiver.at('/balance').map((r) => r.headers['webhook-id'])).size).toBe(2);
});

it("a day's spend on chat replies passing the threshold gives one delivery", async () => {
  const owner = await tenant('Daily alerts', '/daily');
  await putAlerts(owner, { dailyCreditsAbove: 15 });
  await chat(owner.accessToken, owner); // 9 today
  await chat(owner.accessToken, owner); // 18: crossed
  await chat(owner.accessToken, owner); // 27: nothing
  expect((await balanceOf(owner)).balance).toBe(1000 - 27);
  expect(await settledDeliveries('/daily', 1)).toEqual([{ kind: 'daily_credits', threshold: 15, value: 18 }]);
});

it("an API key's spend reaching 50 % of its credit budget gives one delivery naming the key", async () => {
  const owner = await tenant('Key budget alerts', '/key');
  await putAlerts(owner, { keyBudgetPercents: [50] });
  const { key, id } = await createKey(api, owner.accessToken, { limits: { creditBudget: { credits: 36, period: 'month' } } });
  await chat(key, owner); // 9 of 36: 25 %
  await chat(owner.accessToken, owner); // the owner's own session: not the key's budget
  await chat(key, owner); // 18: 50 %
  await chat(key, owner); // 27: 75 %, nothing
  expect(await settledDeliveries('/key', 1)).toEqual([{ kind: 'key_budget', threshold: 50, value: 50, apiKeyId: id }]);
});

it('PUT replaces and validates; GET returns it; owner/admin only, with billing scopes for keys; per tenant', async () => {
  const owner = await signUp(api, 'Alert settings');
  const other = await signUp(api, 'Other tenant');
  expect((await api.get(A, { token: owner.accessToken })).body.data).toEqual({});
  const full = { balanceBelow: 100, keyBudgetPercents: [80, 50, 100], dailyCreditsAbove: 250 };
  expect(await putAlerts(owner, full)).toEqual(full);
  expect((await api.get(A, { token: owner.accessToken })).body.data).toEqual(full);
  // Replaced, not merged.
  expect(await putAlerts(owner, { dailyCreditsAbove: 5 })).toEqual({ dailyCreditsAbove: 5 });
  expect((await api.get(A, { token: owner.accessToken })).body.data).toEqual({ dailyCreditsAbove: 5 });
  // Another tenant's alerts are its own.
  expect((await api.get(A, { token: other.accessToken })).body.data).toEqual({});
  expect(await putAlerts(other, { balanceBelow: 7 })).toEqual({ balanceBelow: 7 });
  expect((await api.get(A, { token: owner.accessToken })).body.data).toEqual({ dailyCreditsAbove: 5 });

  for (const [body, field] of [
    [{ keyBudgetPercents: [0] }, 'keyBudgetPercents'],
    [{ keyBudgetPercents: [101] }, 'keyBudgetPercents'],
    [{ keyBudgetPercents: [50, 50] }, 'keyBudgetPercents'],
    [{ keyBudgetPercents: [12.5] }, 'keyBudgetPercents'],
    [{ keyBudgetPercents: Array.from({ length: 11 }, (_, i) => i + 1) }, 'keyBudgetPercents'],
    [{ balanceBelow: -1 }, 'balanceBelow'],
    [{ balanceBelow: 'ten' }, 'balanceBelow'],
    [{ dailyCreditsAbove: 1.5 }, 'dailyCreditsAbove'],
    [{ lowBalance: 5 }, 'lowBalance'],
  ] as const) {
    const error = expectError(await api.put(A, body, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
    expect(JSON.stringify(error.details.fields)).toContain(field);
  }
  expect((await api.get(A, { token: owner.accessToken })).body.data).toEqual({ dailyCreditsAbove: 5 });

  // A member may not read or change them.
  const m = { email: `m${Date.now()}@example.com`, name: 'Member', role: 'member', password: 'password123' };
  expect((await api.post('/api/v1/tenant/team/members', m, { token: owner.accessToken })).status).toBe(201);
  const member = (await api.post('/api/v1/auth/login', { email: m.email, password: m.password })).body.data.accessToken;
  expectError(await api.get(A, { token: member }), 403, 'FORBIDDEN');
  expectError(await api.put(A, { balanceBelow: 1 }, { token: member }), 403, 'FORBIDDEN');

  // The owner's keys: reading needs billing:read, changing billing:write.
  const reader = await createKey(api, owner.accessToken, { scopes: ['billing:read'] });
  const writer = await createKey(api, owner.accessToken, { scopes: ['billing:write'] });
  const none = await createKey(api, owner.accessToken, { scopes: ['projects:read'] });
  expect((await api.get(A, { token: reader.key })).body.data).toEqual({ dailyCreditsAbove: 5 });
  expectError(await api.put(A, { balanceBelow: 1 }, { token: reader.key }), 403, 'FORBIDDEN');
  expectError(await api.get(A, { token: none.key }), 403, 'FORBIDDEN');
  expect((await api.put(A, { balanceBelow: 1 }, { token: writer.key })).status).toBe(200);
  expect((await api.get(A, { token: owner.accessToken })).body.data).toEqual({ balanceBelow: 1 });
});
