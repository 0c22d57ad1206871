import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
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
const DEFAULT_REPLY = () => ({
  type: 'text' as const,
  text: 'fine',
  chunks: 2,
  delayMs: 100,
  usage: { inputTokens: 50, outputTokens: 40 },
});

beforeAll(async () => {
  openai = await startFakeOpenAI();
  stack = await startStack({
    env: { EGRESS_ALLOW_PRIVATE: 'true', CHAT_DRAIN_MS: '0', CREDITS_PER_1K_TOKENS: '100', LLM_MAX_TOKENS: '100' },
  });
  api = client(stack.url);
  owner = await signUp(api, 'Key budget');
  const llm = { provider: 'openai', baseUrl: openai.url, model: 'gpt-test', apiKey: OPENAI_KEY };
  expect((await api.patch('/api/v1/tenant/settings/llm', llm, { token: owner.accessToken })).status).toBe(200);
  openai.setDefault(DEFAULT_REPLY);
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
  // 150 ms before each of the streamed reply's events: the first call runs about a second.
  openai.script(
    {
      type: 'tool_calls',
      toolCalls: [{ name: 'get_project', arguments: {} }],
      delayMs: 150,
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
  openai.script({ ...step, delayMs: 150 }, step, step, step, step, step, {
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

describe('every model-call path under one budget', () => {
  // Each path on a key of its own with a budget of 25: about two calls fit (9 spent each beside an 11-credit hold;
  // embeddings: 5 spent beside a 20-credit hold), then the budget refuses the next before any model call.
  const PATH_BUDGET = 25;
  const reply = { type: 'text' as const, text: 'fine', chunks: 2, usage: { inputTokens: 50, outputTokens: 40 } };
  const chat = { model: 'gpt-test', messages: [{ role: 'user', content: 'hi' }] };
  const mcp: McpClient[] = [];
  afterAll(async () => {
    await Promise.all(mcp.map((c) => c.close()));
  });

  /** Nothing held any more: the call is settled (or was refused). */
  const idle = () =>
    eventually(
      async () => (await api.get('/api/v1/billing/summary', { token: owner.accessToken })).body.data.credits.reserved === 0,
      15_000,
      50,
    );
  /** A POST read to its end (a stream included); its status. */
  async function post(path: string, body: unknown, key: string): Promise<number> {
    const res = await fetch(stack.url + path, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    await res.text();
    return res.status;
  }
  /** 402 is the budget refusing; anything else must be the path's success. */
  const outcome = (status: number, ok: number) => {
    if (status === 402) return false;
    expect(status).toBe(ok);
    return true;
  };
  async function runEnd(runId: string) {
    let run: { status: string; error: string | null } = { status: '', error: null };
    await eventually(async () => {
      run = (await api.get(`/api/v1/agents/${agentId}/runs/${runId}`, { token: owner.accessToken })).body.data;
      return ['completed', 'failed', 'cancelled'].includes(run.status);
    }, 15_000);
    // A run whose step the budget refused fails with insufficient_credits, having called no model.
    if (run.status === 'failed' && /^insufficient_credits: /.test(run.error ?? '')) return false;
    expect(run.status).toBe('completed');
    return true;
  }

  /** One call on each path: true when it ran (and is settled), false when the key's budget refused it. */
  const paths: Array<[string, (key: string) => Promise<boolean>]> = [
    ['REST chat', async (key) => outcome((await send(key)).status, 202)],
    [
      'agent run',
      async (key) => {
        const res = await api.post(`/api/v1/agents/${agentId}/execute`, { goal: 'Look', projectId }, { token: key });
        return outcome(res.status, 202) && runEnd(res.body.data.id);
      },
    ],
    ['/v1 chat completion', async (key) => outcome(await post('/v1/chat/completions', chat, key), 200)],
    ['/v1 chat completion, streamed', async (key) => outcome(await post('/v1/chat/completions', { ...chat, stream: true }, key), 200)],
    [
      '/v1 response in the background',
      async (key) => outcome(await post('/v1/responses', { model: 'gpt-test', input: 'hi', background: true }, key), 200),
    ],
    ['/v1 embeddings', async (key) => outcome(await post('/v1/embeddings', { model: 'gpt-test', input: 'word '.repeat(40) }, key), 200)],
    ['pass-through', async (key) => outcome(await post('/v1/passthrough/openai/chat/completions', chat, key), 200)],
    [
      'pass-through, streamed',
      async (key) => outcome(await post('/v1/passthrough/openai/chat/completions', { ...chat, stream: true }, key), 200),
    ],
    [
      '/mcp run_agent',
      async (key) => {
        const c = new McpClient({ name: 'budget-table', version: '1.0.0' });
        await c.connect(
          new StreamableHTTPClientTransport(new URL(`${stack.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${key}` } } }),
        );
        mcp.push(c);
        const ran = (await c.callTool({ name: 'run_agent', arguments: { agentId, projectId, goal: 'Look' } })) as {
          isError?: boolean;
          content: Array<{ text: string }>;
          structuredContent?: { runId: string };
        };
        if (ran.isError) {
          expect(ran.content[0].text).toMatch(/INSUFFICIENT_CREDITS|key_budget/);
          return false;
        }
        return runEnd(ran.structuredContent!.runId);
      },
    ],
  ];

  it.each(paths)(
    '%s: a key spends at most its budget, and each model call is in /requests once with its ledger credits',
    async (_, call) => {
      const { key, id } = await createKey(api, owner.accessToken, { limits: { creditBudget: { credits: PATH_BUDGET, period: 'total' } } });
      openai.reset();
      openai.setDefault(() => reply);
      let ran = 0;
      try {
        for (let i = 0; i < 6; i++) {
          const ok = await call(key);
          await idle();
          if (!ok) break;
          ran++;
        }
      } finally {
        openai.setDefault(DEFAULT_REPLY);
      }
      expect(ran).toBeGreaterThanOrEqual(1);
      expect(ran).toBeLessThan(6); // the budget refused a call
      const spent = (await keyView(id)).usage.creditsThisPeriod as number;
      expect(spent).toBeGreaterThan(0);
      expect(spent).toBeLessThanOrEqual(PATH_BUDGET);
      // Every request the provider received is one request-log entry of the key, whose credits sum to its spend.
      const calls = openai.requests.length;
      let logged: Array<{ credits: number; status: string }> = [];
      await eventually(async () => {
        logged = (await api.get(`/api/v1/requests?apiKeyId=${id}&limit=100`, { token: owner.accessToken })).body.data;
        return logged.length >= calls;
      }, 10_000);
      expect(logged).toHaveLength(calls);
      expect(logged.every((r) => r.status === 'ok')).toBe(true);
      expect(logged.reduce((n, r) => n + r.credits, 0)).toBe(spent);
    },
  );
});
