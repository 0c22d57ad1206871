import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// An API key's concurrency and tokensPerMinute (CONTRACT.md 8) against the fake provider: one gateway, no Redis.
let stack: Stack;
let api: Client;
let openai: FakeProviderServer;
let owner: Account;
let projectId: string;
let agentId: string;
const OPENAI_KEY = 'sk-tenant-openai-' + 'k'.repeat(32);
const S = '/api/v1/chat/sessions';

beforeAll(async () => {
  openai = await startFakeOpenAI();
  stack = await startStack({ env: { EGRESS_ALLOW_PRIVATE: 'true', CHAT_DRAIN_MS: '0' } });
  api = client(stack.url);
  owner = await signUp(api, 'Key usage');
  const llm = { provider: 'openai', baseUrl: openai.url, model: 'gpt-test', apiKey: OPENAI_KEY };
  expect((await api.patch('/api/v1/tenant/settings/llm', llm, { token: owner.accessToken })).status).toBe(200);
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
const send = (token: string, sessionId: string, content = 'hello') => api.post(`${S}/${sessionId}/messages`, { content }, { token });
const execute = (token: string, goal = 'Say hello') => api.post(`/api/v1/agents/${agentId}/execute`, { goal, projectId }, { token });

function expectRetryAfter(res: { headers: Headers }) {
  const s = Number(res.headers.get('retry-after'));
  expect(s).toBeGreaterThanOrEqual(1);
  expect(s).toBeLessThanOrEqual(60);
}

describe('concurrency', () => {
  it('refuses a reply past the key limit with 429 and Retry-After, and admits again once one ends', async () => {
    const { key } = await createKey(api, owner.accessToken, { limits: { concurrency: 2 } });
    openai.setDefault(() => ({ type: 'text', text: 'slow reply here', chunks: 3, delayMs: 400 }));
    try {
      const [s1, s2, s3] = [await session(key), await session(key), await session(key)];
      const accepted = await Promise.all([send(key, s1), send(key, s2)]);
      expect(accepted.map((r) => r.status)).toEqual([202, 202]);
      const refused = await send(key, s3);
      expect(expectError(refused, 429, 'RATE_LIMIT_EXCEEDED').details).toMatchObject({ reason: 'key_concurrency', limit: 2 });
      expectRetryAfter(refused);
      // Another credential of the tenant is not held by this key's limit.
      expect((await send(owner.accessToken, await session(owner.accessToken))).status).toBe(202);
      // Once a reply has ended, the key has a place again.
      await eventually(async () => (await send(key, s3)).status === 202, 10_000, 100);
    } finally {
      openai.setDefault(undefined);
    }
  });

  it('counts agent runs of the key the same way', async () => {
    const { key, id } = await createKey(api, owner.accessToken, { limits: { concurrency: 1 } });
    // 300 ms before each streamed event: a run's call holds its place for about a second and a half.
    openai.setDefault(() => ({ type: 'text', text: 'done', delayMs: 300 }));
    try {
      expect((await execute(key)).status).toBe(202);
      const refused = await execute(key);
      expect(expectError(refused, 429, 'RATE_LIMIT_EXCEEDED').details).toMatchObject({ reason: 'key_concurrency', limit: 1 });
      expectRetryAfter(refused);
      // Raised by PATCH: the next request carries the new limit.
      expect((await api.patch(`/api/v1/api-keys/${id}`, { limits: { concurrency: 2 } }, { token: owner.accessToken })).status).toBe(200);
      await eventually(async () => (await execute(key)).status === 202, 2000, 50);
      // Every run ends before the stack stops.
      await eventually(
        async () => {
          const runs = (await api.get(`/api/v1/agents/${agentId}/runs?limit=100`, { token: owner.accessToken })).body.data;
          return runs.every((r: any) => ['completed', 'failed', 'cancelled'].includes(r.status));
        },
        15_000,
        100,
      );
    } finally {
      openai.setDefault(undefined);
    }
  });
});

describe('tokensPerMinute', () => {
  it('refuses new model calls once the minute’s recorded tokens reach the limit', async () => {
    // Counted in fixed minutes: keep the call and the refusal in one of them.
    if (Date.now() % 60_000 > 45_000) await new Promise((r) => setTimeout(r, 60_000 - (Date.now() % 60_000) + 200));
    const { key, id } = await createKey(api, owner.accessToken, { limits: { tokensPerMinute: 50 } });
    openai.script({ type: 'text', text: 'a reply', usage: { inputTokens: 40, outputTokens: 20 } });
    const s = await session(key);
    expect((await send(key, s)).status).toBe(202);
    // The usage is recorded when the call ends: the view shows it.
    let usage: any;
    await eventually(async () => {
      usage = (await api.get(`/api/v1/api-keys/${id}`, { token: owner.accessToken })).body.data.usage;
      return usage.tokensThisMinute > 0;
    }, 10_000);
    expect(usage.tokensThisMinute).toBe(60);
    expect(usage.creditsThisPeriod).toBeGreaterThan(0);
    for (const res of [await send(key, s), await execute(key)]) {
      expect(expectError(res, 429, 'RATE_LIMIT_EXCEEDED').details).toMatchObject({ reason: 'tokens_per_minute', limit: 50 });
      expectRetryAfter(res);
    }
    // Another key of the tenant has its own minute.
    const other = await createKey(api, owner.accessToken, { limits: { tokensPerMinute: 50 } });
    expect((await send(other.key, await session(other.key))).status).toBe(202);
  });
});
