import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, eventually, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// One tenant's slow work holds only its own share (issue 8): A points its LLM at a server that never answers and
// starts more runs and chat replies than its limits; B's run and reply go through at once.
jest.setTimeout(60_000);

let stack: Stack;
let api: Client;
let slowLlm: FakeProviderServer;
let fastLlm: FakeProviderServer;

beforeAll(async () => {
  slowLlm = await startFakeOpenAI({ apiKey: 'sk-slow' });
  slowLlm.setDefault(() => ({ type: 'hang' }));
  fastLlm = await startFakeOpenAI({ apiKey: 'sk-fast' });
  stack = await startStack({
    env: {
      EGRESS_ALLOW_PRIVATE: 'true',
      AGENTS_POLL_MS: '50',
      AGENTS_WORKER_CONCURRENCY: '4',
      AGENTS_TENANT_CONCURRENCY: '2',
      CHAT_TENANT_CONCURRENCY: '2',
    },
  });
  api = client(stack.url);
});
afterAll(async () => {
  // The provider first: A's runs and replies hanging on it end at once, instead of each service waiting them out.
  await slowLlm.close();
  await fastLlm.close();
  await stack.stop();
});

async function tenantWith(
  llm: FakeProviderServer,
  apiKey: string,
  name: string,
): Promise<{ owner: Account; agentId: string; projectId: string }> {
  const owner = await signUp(api, name);
  const t = { token: owner.accessToken };
  expect(
    (await api.patch('/api/v1/tenant/settings/llm', { provider: 'openai', model: 'gpt-fake', baseUrl: llm.url, apiKey }, t)).status,
  ).toBe(200);
  const projectId = (await api.post('/api/v1/projects', { name: `${name} project` }, t)).body.data.id;
  const agentId = (await api.post('/api/v1/agents', { name: 'runner', systemPrompt: 'Be brief.', config: { autonomyLevel: 'manual' } }, t))
    .body.data.id;
  return { owner, agentId, projectId };
}

const runOf = async (owner: Account, agentId: string, runId: string) =>
  (await api.get(`/api/v1/agents/${agentId}/runs/${runId}`, { token: owner.accessToken })).body.data;

it("starts B's run at once while A's slow runs fill A's limit", async () => {
  const a = await tenantWith(slowLlm, 'sk-slow', 'Slow A');
  const b = await tenantWith(fastLlm, 'sk-fast', 'Quick B');
  const aRuns: string[] = [];
  for (let i = 0; i < 4; i++) {
    const res = await api.post(
      `/api/v1/agents/${a.agentId}/execute`,
      { goal: `slow ${i}`, projectId: a.projectId },
      { token: a.owner.accessToken },
    );
    expect(res.status).toBe(202);
    aRuns.push(res.body.data.id);
  }
  // A's limit is two running runs: both hang at the provider; its other two stay queued.
  await eventually(async () => slowLlm.requests.length === 2);
  const bRes = await api.post(
    `/api/v1/agents/${b.agentId}/execute`,
    { goal: 'quick', projectId: b.projectId },
    { token: b.owner.accessToken },
  );
  expect(bRes.status).toBe(202);
  const waited = await eventually(async () => (await runOf(b.owner, b.agentId, bRes.body.data.id)).status === 'completed', 20_000);
  const aStatuses = await Promise.all(aRuns.map(async (id) => (await runOf(a.owner, a.agentId, id)).status));
  expect(aStatuses.sort()).toEqual(['queued', 'queued', 'running', 'running']);
  console.info(`B's run completed ${waited} ms after execute while A's two runs hung`);
});

it("answers B's chat message at once while A's replies are at A's cap; A's next message is a 429", async () => {
  const a = await tenantWith(slowLlm, 'sk-slow', 'Chatty A');
  const b = await tenantWith(fastLlm, 'sk-fast', 'Chatty B');
  const send = async (who: Account, content: string) => {
    const session = (await api.post('/api/v1/chat/sessions', { title: content }, { token: who.accessToken })).body.data.id;
    return { session, res: await api.post(`/api/v1/chat/sessions/${session}/messages`, { content }, { token: who.accessToken }) };
  };
  const before = slowLlm.requests.length;
  for (const n of [1, 2]) expect((await send(a.owner, `hang ${n}`)).res.status).toBe(202);
  await eventually(async () => slowLlm.requests.length === before + 2);
  const third = (await send(a.owner, 'hang 3')).res;
  expect(third.status).toBe(429);
  expect(third.body.error).toMatchObject({ code: 'RATE_LIMIT_EXCEEDED', details: { reason: 'too_many_replies', limit: 2 } });
  expect(third.headers.get('retry-after')).toBe('1');
  const { session, res } = await send(b.owner, 'hello');
  expect(res.status).toBe(202);
  await eventually(async () => {
    const list = (await api.get(`/api/v1/chat/sessions/${session}/messages`, { token: b.owner.accessToken })).body.data;
    return list.some((m: { role: string; status: string }) => m.role === 'assistant' && m.status === 'completed');
  }, 20_000);
});
