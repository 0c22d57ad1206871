/**
 * Calls routed by catalogue name (CONTRACT.md 12), through the gateway to fake providers on loopback: a chat session
 * or message naming a model uses its entry's provider; two entries of a name share its calls; an entry that fails
 * before its first token hands the call to its sibling; /v1/models lists the names once, then the default model and
 * the agents; a name the catalogue does not have is 404 model_not_found on /v1 (OpenAI's shape) and on REST; the
 * usage is recorded under the name asked for.
 */
import { startFakeAnthropic, startFakeOpenAI, echoText, fakeEmbedding, type FakeProviderServer, type FakeRequest } from '@svc/llm/testing';
import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

const M = '/api/v1/models';
const S = '/api/v1/chat/sessions';
const LLM = '/api/v1/tenant/settings/llm';

let stack: Stack;
let api: Client;
let main: FakeProviderServer;
let left: FakeProviderServer;
let right: FakeProviderServer;
let claude: FakeProviderServer;
let owner: Account;
let t: { token: string };
let key: string;

/** Chat requests each fake received for each model. */
const chats = (fake: FakeProviderServer, model?: string) =>
  fake.requests.filter(
    (r: FakeRequest) =>
      (r.path.endsWith('/chat/completions') || r.path.endsWith('/messages')) && (!model || r.conversation?.model === model),
  ).length;

beforeAll(async () => {
  [main, left, right, claude] = await Promise.all([startFakeOpenAI(), startFakeOpenAI(), startFakeOpenAI(), startFakeAnthropic()]);
  stack = await startStack({ env: { EGRESS_ALLOW_PRIVATE: 'true', CHAT_DRAIN_MS: '0', CHAT_LLM_SETTINGS_CACHE_MS: '0' } });
  api = client(stack.url);
  owner = await signUp(api, 'Routing');
  t = { token: owner.accessToken };
  expect((await api.patch(LLM, { provider: 'openai-compatible', baseUrl: main.url, model: 'default-model' }, t)).status).toBe(200);
  key = (await createKey(api, owner.accessToken)).key;
  const entries = [
    {
      name: 'claude-fast',
      provider: 'anthropic',
      upstreamModel: 'claude-up',
      baseUrl: claude.url,
      apiKey: 'sk-ant-test',
      maxOutputTokens: 77,
    },
    { name: 'pair', provider: 'openai-compatible', upstreamModel: 'pair-left', baseUrl: left.url, weight: 1 },
    { name: 'pair', provider: 'openai-compatible', upstreamModel: 'pair-right', baseUrl: right.url, weight: 1 },
    { name: 'shaky', provider: 'openai-compatible', upstreamModel: 'shaky-bad', baseUrl: left.url, weight: 1000 },
    { name: 'shaky', provider: 'openai-compatible', upstreamModel: 'shaky-good', baseUrl: right.url, weight: 1 },
    { name: 'off', provider: 'openai-compatible', upstreamModel: 'off-up', baseUrl: right.url, enabled: false },
  ];
  for (const e of entries) expect((await api.post(M, e, t)).status).toBe(201);
  // The heavy entry of "shaky" always fails before its first token.
  left.setDefault((r: FakeRequest) =>
    r.conversation?.model === 'shaky-bad'
      ? { type: 'error', status: 503 }
      : { type: 'text', text: echoText(r.conversation?.messages.at(-1)?.text ?? '') },
  );
});
afterAll(async () => {
  await stack.stop();
  await Promise.all([main.close(), left.close(), right.close(), claude.close()]);
});

const completion = (model: string, extra: Record<string, unknown> = {}) =>
  api.post('/v1/chat/completions', { model, messages: [{ role: 'user', content: 'hello' }], ...extra }, { token: key });

async function reply(sessionId: string, responseMessageId: string): Promise<any> {
  let found: any;
  await eventually(async () => {
    const list = (await api.get(`${S}/${sessionId}/messages?limit=100`, t)).body.data as any[];
    found = list.find((m) => m.id === responseMessageId);
    return found?.status === 'completed' || found?.status === 'failed';
  }, 15_000);
  return found;
}

it("answers a session that names a model with that entry's provider, and a message may name another", async () => {
  const created = await api.post(S, { model: 'claude-fast' }, t);
  expect(created.status).toBe(201);
  expect(created.body.data.model).toBe('claude-fast');
  const sid = created.body.data.id;
  const first = await api.post(`${S}/${sid}/messages`, { content: 'to claude' }, t);
  expect(first.status).toBe(202);
  const r1 = await reply(sid, first.body.data.responseMessageId);
  expect(r1).toMatchObject({ status: 'completed', model: 'claude-up' });
  const seen = claude.requests.find((r) => r.conversation?.model === 'claude-up');
  expect(seen?.body).toMatchObject({ max_tokens: 77 }); // the entry's maxOutputTokens bounds the call
  const before = chats(main, 'default-model');
  const second = await api.post(`${S}/${sid}/messages`, { content: 'to the pair', model: 'pair' }, t);
  const r2 = await reply(sid, second.body.data.responseMessageId);
  expect(['pair-left', 'pair-right']).toContain(r2.model);
  // A session without a model uses the default model.
  const plain = (await api.post(S, {}, t)).body.data.id;
  const third = await api.post(`${S}/${plain}/messages`, { content: 'to the default' }, t);
  expect((await reply(plain, third.body.data.responseMessageId)).model).toBe('default-model');
  expect(chats(main, 'default-model')).toBe(before + 1);
});

it('spreads the calls to a name over its enabled entries', async () => {
  const before = [chats(left, 'pair-left'), chats(right, 'pair-right')];
  const served: string[] = [];
  for (let i = 0; i < 30; i++) {
    const res = await completion('pair');
    expect(res.status).toBe(200);
    expect(res.headers.get('x-served-model')).toBe(res.body.model);
    served.push(res.body.model);
  }
  const l = chats(left, 'pair-left') - before[0];
  const r = chats(right, 'pair-right') - before[1];
  expect(l + r).toBe(30);
  // Weights 1:1: all 30 on one side would happen about twice in a billion runs.
  expect(l).toBeGreaterThan(0);
  expect(r).toBeGreaterThan(0);
  expect(served.filter((m) => m === 'pair-left')).toHaveLength(l);
});

it('moves a call whose entry fails before its first token to a sibling entry of the name', async () => {
  for (let i = 0; i < 3; i++) {
    const res = await completion('shaky', { stream: i === 2 });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-served-model')).toBe('shaky-good');
  }
  expect(chats(right, 'shaky-good')).toBe(3);
  expect(chats(left, 'shaky-bad')).toBeGreaterThanOrEqual(1);
});

it('lists each catalogue name once, then the default model, then the agents', async () => {
  const agent = (await api.post('/api/v1/agents', { name: 'Lister', systemPrompt: 'hi', config: { autonomyLevel: 'manual' } }, t)).body
    .data;
  const res = await api.get('/v1/models', { token: key });
  expect(res.status).toBe(200);
  const ids = res.body.data.map((m: { id: string }) => m.id);
  expect(ids).toEqual(['claude-fast', 'pair', 'shaky', 'default-model', `agent:${agent.id}`]);
});

it("runs an agent whose model is a catalogue name on that name's entries", async () => {
  const project = (await api.post('/api/v1/projects', { name: 'Routed' }, t)).body.data;
  const agent = (
    await api.post(
      '/api/v1/agents',
      { name: 'Routed', systemPrompt: 'Be brief.', config: { autonomyLevel: 'manual', model: 'claude-fast' } },
      t,
    )
  ).body.data;
  const started = await api.post(`/api/v1/agents/${agent.id}/execute`, { goal: 'say hi', projectId: project.id }, t);
  expect(started.status).toBe(202);
  let run: any;
  await eventually(async () => {
    run = (await api.get(`/api/v1/agents/${agent.id}/runs/${started.body.data.id}`, t)).body.data;
    return run.status === 'completed' || run.status === 'failed';
  }, 20_000);
  expect(run.status).toBe('completed');
  expect(run.steps[0].model).toBe('claude-up');
});

it('answers a name with no enabled entry with 404 model_not_found, on /v1 and on REST', async () => {
  for (const name of ['nope', 'off']) {
    const res = await completion(name);
    expect(res.status).toBe(404);
    expect(res.body.error).toMatchObject({ code: 'model_not_found', param: 'model' });
    const resp = await api.post('/v1/responses', { model: name, input: 'hi' }, { token: key });
    expect(resp.status).toBe(404);
    expect(resp.body.error.code).toBe('model_not_found');
  }
  const err = expectError(await api.post(S, { model: 'nope' }, t), 404, 'RESOURCE_NOT_FOUND');
  expect(err.details).toMatchObject({ reason: 'model_not_found' });
  const sid = (await api.post(S, {}, t)).body.data.id;
  const msg = expectError(await api.post(`${S}/${sid}/messages`, { content: 'x', model: 'off' }, t), 404, 'RESOURCE_NOT_FOUND');
  expect(msg.details.reason).toBe('model_not_found');
  // The default model's name still works on /v1.
  expect((await completion('default-model')).status).toBe(200);
});

it('keeps catalogue names to their tenant', async () => {
  const other = await signUp(api, 'RoutingOther');
  await api.patch(LLM, { provider: 'openai-compatible', baseUrl: main.url, model: 'other-default' }, { token: other.accessToken });
  const otherKey = (await createKey(api, other.accessToken)).key;
  const res = await api.post('/v1/chat/completions', { model: 'pair', messages: [{ role: 'user', content: 'hi' }] }, { token: otherKey });
  expect(res.status).toBe(404);
  expect((await api.get('/v1/models', { token: otherKey })).body.data.map((m: { id: string }) => m.id)).toEqual(['other-default']);
});

it("reads an entry's apiKeySecret at each call, so a new secret value applies to the next call", async () => {
  const keyed = await startFakeOpenAI({ apiKey: 'sk-first' });
  try {
    expect((await api.post('/api/v1/secrets', { name: 'ROUTED_KEY', value: 'sk-first' }, t)).status).toBe(201);
    expect(
      (await api.post(M, { name: 'keyed', provider: 'openai-compatible', baseUrl: keyed.url, apiKeySecret: 'ROUTED_KEY' }, t)).status,
    ).toBe(201);
    expect((await completion('keyed')).status).toBe(200);
    expect(keyed.requests.at(-1)?.headers.authorization).toBe('Bearer sk-first');
    await api.put('/api/v1/secrets/ROUTED_KEY', { value: 'sk-second' }, t);
    const refused = await completion('keyed');
    expect(refused.status).toBeGreaterThanOrEqual(400); // the fake only knows the first key
    expect(keyed.requests.at(-1)?.headers.authorization).toBe('Bearer sk-second');
  } finally {
    await keyed.close();
  }
});

it('records the usage under the name asked for, not the upstream model', async () => {
  const from = new Date(Date.now() - 3_600_000).toISOString();
  const to = new Date(Date.now() + 3_600_000).toISOString();
  // The name as billing's rows show it (older billing prefixes the provider: "anthropic/claude-fast").
  const names = (rows: Array<{ model: string }>) => rows.map((r) => r.model.slice(r.model.lastIndexOf('/') + 1));
  let models: string[] = [];
  await eventually(async () => {
    const res = await api.get(`/api/v1/billing/usage?from=${from}&to=${to}&groupBy=model`, t);
    models = names(res.body.data);
    return ['pair', 'claude-fast', 'shaky', 'default-model'].every((m) => models.includes(m));
  }, 10_000).catch(() => undefined);
  expect(models).toEqual(expect.arrayContaining(['pair', 'claude-fast', 'shaky', 'default-model']));
  for (const upstream of ['pair-left', 'pair-right', 'shaky-good', 'claude-up']) expect(models).not.toContain(upstream);
});

describe('POST /v1/embeddings', () => {
  const embed = (body: Record<string, unknown>, token = key) => api.post('/v1/embeddings', body, { token });
  const embedRequests = (fake: FakeProviderServer, model: string) =>
    fake.requests.filter((r: FakeRequest) => r.path.endsWith('/embeddings') && (r.body as { model?: string })?.model === model);

  beforeAll(async () => {
    const entries = [
      // One credit a token: the call's credits are its input tokens.
      {
        name: 'embedder',
        provider: 'openai-compatible',
        upstreamModel: 'embed-up',
        baseUrl: right.url,
        price: { input: 1_000_000, output: 0 },
      },
      { name: 'dear-embed', provider: 'openai-compatible', upstreamModel: 'dear-up', baseUrl: right.url, price: { input: 1e8, output: 0 } },
    ];
    for (const e of entries) expect((await api.post(M, e, t)).status).toBe(201);
  });

  it("embeds on a catalogue model, as OpenAI answers, billed at the entry's input price and logged as a v1 call", async () => {
    const input = ['first text', 'the second text'];
    const res = await embed({ model: 'embedder', input, dimensions: 8, user: 'end-user-7' });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-served-model')).toBe('embed-up');
    expect(res.body).toMatchObject({
      object: 'list',
      model: 'embed-up',
      data: [
        { object: 'embedding', index: 0, embedding: fakeEmbedding(input[0], 8) },
        { object: 'embedding', index: 1, embedding: fakeEmbedding(input[1], 8) },
      ],
    });
    const tokens = res.body.usage.prompt_tokens;
    expect(tokens).toBeGreaterThan(0);
    expect(res.body.usage).toEqual({ prompt_tokens: tokens, total_tokens: tokens });
    expect(embedRequests(right, 'embed-up').at(-1)?.body).toMatchObject({ input, dimensions: 8 });

    // base64: the same vector as little-endian float32s; one string is one input.
    const b64 = await embed({ model: 'embedder', input: input[0], dimensions: 8, encoding_format: 'base64' });
    expect(b64.status).toBe(200);
    const bytes = Buffer.from(b64.body.data[0].embedding as string, 'base64');
    const floats = Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4));
    expect(floats).toHaveLength(8);
    floats.forEach((f, i) => expect(f).toBeCloseTo(fakeEmbedding(input[0], 8)[i], 5));

    let logged: Array<Record<string, any>> = [];
    await eventually(async () => {
      logged = (await api.get('/api/v1/requests?model=embedder', t)).body.data;
      return logged.length === 2;
    }, 10_000);
    // Newest first: the first call is the second entry.
    expect(logged[1]).toMatchObject({
      source: 'v1',
      model: 'embedder',
      servedModel: 'embed-up',
      status: 'ok',
      endUser: 'end-user-7',
      inputTokens: tokens,
      outputTokens: 0,
      credits: tokens,
    });
    expect(logged[1].apiKeyId).toEqual(expect.any(String));
    expect(logged[0].credits).toBe(logged[0].inputTokens);
  });

  it('answers an unknown model 404, a model without embeddings 400 and a bad body 400, in OpenAI shape', async () => {
    for (const name of ['nope', 'off']) {
      const res = await embed({ model: name, input: 'hi' });
      expect(res.status).toBe(404);
      expect(res.body.error).toMatchObject({ code: 'model_not_found', param: 'model', message: expect.any(String) });
    }
    const anthropic = await embed({ model: 'claude-fast', input: 'hi' });
    expect(anthropic.status).toBe(400);
    expect(anthropic.body.error).toMatchObject({ code: 'embeddings_not_supported', type: 'invalid_request_error' });
    for (const body of [
      { model: 'embedder' },
      { model: 'embedder', input: [] },
      { model: 'embedder', input: ['text', 2, 3] },
      { model: 'embedder', input: [[1, 2], []] },
      { model: 'embedder', input: [-1] },
      { model: 'embedder', input: [1.5] },
      { model: 'embedder', input: '' },
      { model: 'embedder', input: 'hi', encoding_format: 'int8' },
      { model: 'embedder', input: 'hi', dimensions: 0 },
      { input: 'hi' },
    ]) {
      const res = await embed(body);
      expect(res.status).toBe(400);
      expect(res.body.error).toMatchObject({ type: 'invalid_request_error', message: expect.any(String) });
    }
  });

  it('embeds token arrays as OpenAI does: passed to the provider as they are, billed a token an id', async () => {
    const before = embedRequests(right, 'embed-up').length;
    const one = await embed({ model: 'embedder', input: [11, 22, 33], dimensions: 8 });
    expect(one.status).toBe(200);
    expect(one.body.data).toEqual([{ object: 'embedding', index: 0, embedding: fakeEmbedding('11 22 33', 8) }]);
    expect(one.body.usage).toEqual({ prompt_tokens: 3, total_tokens: 3 });
    const many = await embed({
      model: 'embedder',
      input: [
        [1, 2],
        [3, 4, 5, 6],
      ],
    });
    expect(many.status).toBe(200);
    expect(many.body.data.map((d: { embedding: number[] }) => d.embedding)).toEqual([fakeEmbedding('1 2'), fakeEmbedding('3 4 5 6')]);
    expect(many.body.usage.prompt_tokens).toBe(6);
    expect(
      embedRequests(right, 'embed-up')
        .slice(before)
        .map((r) => (r.body as { input: unknown }).input),
    ).toEqual([
      [[11, 22, 33]],
      [
        [1, 2],
        [3, 4, 5, 6],
      ],
    ]);
    // One credit a token: each call is billed its ids.
    await eventually(async () => {
      const logged = (await api.get('/api/v1/requests?model=embedder&limit=2', t)).body.data as Array<{ credits: number }>;
      return logged.map((r) => r.credits).join() === '6,3';
    }, 10_000);
  });

  it('refuses a call the credits do not cover with 402 before the provider sees it', async () => {
    // 100 credits a token: 100 characters hold far more than the 1,000 credits a tenant starts with.
    const res = await embed({ model: 'dear-embed', input: 'x'.repeat(100) });
    expect(res.status).toBe(402);
    expect(res.body.error).toMatchObject({ type: 'insufficient_quota', message: expect.any(String) });
    expect(embedRequests(right, 'dear-up')).toHaveLength(0);
  });
});
