import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// An API key's credit budget (CONTRACT.md 8) through the gateway against the fake provider. Priced so the sums are
// plain: 100 credits per 1,000 tokens, every call holds its prompt plus 100 tokens (about 11 credits) and the
// provider reports 90 tokens (9 credits).
let stack: Stack;
let api: Client;
let openai: FakeProviderServer;
let owner: Account;
let projectId: string;
let agentId: string;
const OPENAI_KEY = 'sk-tenant-openai-' + 'b'.repeat(32);
const S = '/api/v1/chat/sessions';
const BUDGET = 40;
const HOLD = 11;

beforeAll(async () => {
  openai = await startFakeOpenAI();
  stack = await startStack({
    env: { EGRESS_ALLOW_PRIVATE: 'true', CHAT_DRAIN_MS: '0', CREDITS_PER_1K_TOKENS: '100', LLM_MAX_TOKENS: '100' },
  });
  api = client(stack.url);
  owner = await signUp(api, 'Key budget');
  const llm = { provider: 'openai', baseUrl: openai.url, model: 'gpt-test', apiKey: OPENAI_KEY };
  expect((await api.patch('/api/v1/tenant/settings/llm', llm, { token: owner.accessToken })).status).toBe(200);
  openai.setDefault(() => ({ type: 'text', text: 'fine', chunks: 2, delayMs: 100, usage: { inputTokens: 50, outputTokens: 40 } }));
  projectId = (await api.post('/api/v1/projects', { name: 'Site', description: 'd', language: 'go' }, { token: owner.accessToken })).body
    .data.id;
  const agent = await api.post(
    '/api/v1/agents',
    { name: 'runner', systemPrompt: 'Be brief.', config: { autonomyLevel: 'autonomous' } },
    { token: owner.accessToken },
  );
  agentId = agent.body.data.id;
});
afterAll(async () => {
  await stack.stop();
  await openai.close();
});

const session = async (token: string) => (await api.post(S, {}, { token })).body.data.id as string;
const send = async (token: string) => api.post(`${S}/${await session(token)}/messages`, { content: 'hi' }, { token });
const keyView = async (id: string) => (await api.get(`/api/v1/api-keys/${id}`, { token: owner.accessToken })).body.data;

/** Until the key has no reply still running: every accepted call is settled in the ledger. */
async function settled(id: string) {
  await eventually(
    async () => (await api.get('/api/v1/billing/summary', { token: owner.accessToken })).body.data.credits.reserved === 0,
    15_000,
    100,
  );
  return (await keyView(id)).usage.creditsThisPeriod as number;
}

it('stops a key within one reservation of its budget, never past it, and a raised budget lets calls through at once', async () => {
  const { key, id } = await createKey(api, owner.accessToken, { limits: { creditBudget: { credits: BUDGET, period: 'total' } } });
  let accepted = 0;
  let spent = 0;
  // Waves of 8 concurrent messages until a whole wave is refused: the budget, not the tenant, refuses them.
  for (let wave = 0; wave < 10; wave++) {
    const results = await Promise.all(Array.from({ length: 8 }, () => send(key)));
    const ok = results.filter((r) => r.status === 202).length;
    for (const r of results.filter((r) => r.status !== 202))
      expect(expectError(r, 402, 'INSUFFICIENT_CREDITS').details).toMatchObject({ reason: 'key_budget_exhausted', apiKeyId: id });
    // What is open fits in the budget beside what was spent.
    expect(ok * HOLD).toBeLessThanOrEqual(BUDGET - spent);
    accepted += ok;
    spent = await settled(id);
    expect(spent).toBeLessThanOrEqual(BUDGET);
    if (ok === 0) break;
  }
  expect(accepted).toBeGreaterThanOrEqual(3);
  expect(spent).toBe(accepted * 9);
  expect(spent).toBeGreaterThan(BUDGET - HOLD);
  expect(spent).toBeLessThanOrEqual(BUDGET);

  // Other credentials of the tenant are not held by this key's budget.
  const other = await createKey(api, owner.accessToken);
  expect((await send(other.key)).status).toBe(202);
  expect((await send(owner.accessToken)).status).toBe(202);

  // Raised by PATCH: the next call of the key fits, within a second.
  const patched = await api.patch(
    `/api/v1/api-keys/${id}`,
    { limits: { creditBudget: { credits: BUDGET + 20, period: 'total' } } },
    { token: owner.accessToken },
  );
  expect(patched.status).toBe(200);
  await eventually(async () => (await send(key)).status === 202, 1000, 50);
  await settled(id);
});

it("a lowered budget refuses an agent run's next step, which reserves under the run's delegated token", async () => {
  const { key, id } = await createKey(api, owner.accessToken, { limits: { creditBudget: { credits: 100, period: 'month' } } });
  openai.script(
    {
      type: 'tool_calls',
      toolCalls: [{ name: 'get_project', arguments: {} }],
      delayMs: 1000,
      usage: { inputTokens: 50, outputTokens: 40 },
    },
    { type: 'text', text: 'Done.', usage: { inputTokens: 50, outputTokens: 40 } },
  );
  const executed = await api.post(`/api/v1/agents/${agentId}/execute`, { goal: 'Look', projectId }, { token: key });
  expect(executed.status).toBe(202);
  const runId = executed.body.data.id as string;
  // While the first step's call runs, the budget drops to what that call may cost: the next step does not fit.
  const lowered = { limits: { creditBudget: { credits: HOLD + 1, period: 'month' } } };
  expect((await api.patch(`/api/v1/api-keys/${id}`, lowered, { token: owner.accessToken })).status).toBe(200);
  let run: any;
  await eventually(
    async () => {
      run = (await api.get(`/api/v1/agents/${agentId}/runs/${runId}`, { token: owner.accessToken })).body.data;
      return ['completed', 'failed', 'cancelled'].includes(run.status);
    },
    15_000,
    100,
  );
  expect(run.status).toBe('failed');
  expect(run.error).toMatch(/^insufficient_credits: /);
  expect(await settled(id)).toBe(9);
});

it('a revoked key’s running agent stops at its budget: the run’s later steps reserve under the budget the key had', async () => {
  // 30 credits: two steps (an 11-credit hold each, 9 spent each) fit, the third's hold does not (30 - 18 < 11).
  const { key, id } = await createKey(api, owner.accessToken, { limits: { creditBudget: { credits: 30, period: 'total' } } });
  const step = {
    type: 'tool_calls' as const,
    toolCalls: [{ name: 'get_project', arguments: {} }],
    usage: { inputTokens: 50, outputTokens: 40 },
  };
  openai.reset(); // what an earlier test left queued
  openai.script({ ...step, delayMs: 1000 }, step, step, step, step, step, {
    type: 'text',
    text: 'Done.',
    usage: { inputTokens: 50, outputTokens: 40 },
  });
  const executed = await api.post(`/api/v1/agents/${agentId}/execute`, { goal: 'Look a lot', projectId }, { token: key });
  expect(executed.status).toBe(202);
  const runId = executed.body.data.id as string;
  // Revoked while the first step's call runs: the run goes on under its delegated token.
  expect((await api.del(`/api/v1/api-keys/${id}`, { token: owner.accessToken })).status).toBe(200);
  await eventually(async () => (await api.get('/api/v1/projects', { token: key })).status === 401);
  let run: any;
  await eventually(
    async () => {
      run = (await api.get(`/api/v1/agents/${agentId}/runs/${runId}`, { token: owner.accessToken })).body.data;
      return ['completed', 'failed', 'cancelled'].includes(run.status);
    },
    20_000,
    100,
  );
  expect(run.status).toBe('failed');
  expect(run.error).toMatch(/^insufficient_credits: /);
  await eventually(async () => (await api.get('/api/v1/billing/summary', { token: owner.accessToken })).body.data.credits.reserved === 0);
  const lines = (await api.get('/api/v1/billing/summary', { token: owner.accessToken })).body.data.usage.byCredential as Array<{
    key: string;
    credits: number;
    calls: number;
  }>;
  expect(lines.find((l) => l.key === id)).toMatchObject({ calls: 2, credits: 18 });
});
