import OpenAI from 'openai';
import { echoText, fakeEmbedding, startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, createKey, eventually, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// The OpenAI-compatible API (CONTRACT.md 9) driven by the real `openai` package, against the whole system with the
// fake OpenAI provider as the tenant's model.
jest.setTimeout(60_000);

let stack: Stack;
let api: Client;
let fake: FakeProviderServer;
let owner: Account;
let key: string;
let ai: OpenAI;
const MODEL = 'gpt-test';
const PROVIDER_KEY = 'sk-tenant-provider-' + 'p'.repeat(32);

const openaiFor = (apiKey: string) => new OpenAI({ apiKey, baseURL: `${stack.url}/v1`, maxRetries: 0, timeout: 30_000 });

beforeAll(async () => {
  fake = await startFakeOpenAI({ apiKey: PROVIDER_KEY });
  stack = await startStack({
    env: {
      EGRESS_ALLOW_PRIVATE: 'true',
      AGENTS_POLL_MS: '50',
      CHAT_POLL_MS: '50',
      CHAT_DRAIN_MS: '0',
      // This suite makes the provider fail on purpose; the model's circuit must not open on the calls after
      // (breakers have their own suite, test/http/llm-fallbacks.test.ts).
      LLM_BREAKER_FAILURES: '1000',
    },
  });
  api = client(stack.url);
  owner = await signUp(api, 'OpenAI compat');
  const llm = await api.patch(
    '/api/v1/tenant/settings/llm',
    { provider: 'openai', baseUrl: fake.url, model: MODEL, apiKey: PROVIDER_KEY },
    { token: owner.accessToken },
  );
  expect(llm.status).toBe(200);
  key = (await createKey(api, owner.accessToken)).key;
  ai = openaiFor(key);
});
afterAll(async () => {
  await stack.stop();
  await fake.close();
});
afterEach(() => fake.reset());

const lastRequest = () => fake.requests.filter((r) => r.path.endsWith('/chat/completions')).at(-1)!;

/** Billing holds nothing once every call has settled. */
async function settled() {
  await eventually(
    async () => (await api.get('/api/v1/billing/summary', { token: owner.accessToken })).body.data.credits.reserved === 0,
    10_000,
  );
}

describe('models', () => {
  it("lists the tenant's model and its agents", async () => {
    const agent = (await api.post('/api/v1/agents', { name: 'Lister', systemPrompt: 'p', config: {} }, { token: owner.accessToken })).body
      .data;
    const ids = [];
    for await (const m of ai.models.list()) ids.push(m.id);
    expect(ids).toEqual(expect.arrayContaining([MODEL, `agent:${agent.id}`]));
    const raw = await fetch(`${stack.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    expect(raw.headers.get('x-request-id')).toBeTruthy();
    expect(raw.headers.get('x-ratelimit-limit')).toBeTruthy();
  });
});

describe('chat completions', () => {
  it('answers without streaming, with the served model and usage', async () => {
    const res = await ai.chat.completions
      .create({
        model: MODEL,
        messages: [
          { role: 'system', content: 'Be brief' },
          { role: 'user', content: 'hello there' },
        ],
      })
      .withResponse();
    expect(res.data.choices[0].message.content).toBe(echoText('hello there'));
    expect(res.data.choices[0].finish_reason).toBe('stop');
    expect(res.data.model).toBe(MODEL);
    expect(res.response.headers.get('x-served-model')).toBe(MODEL);
    expect(res.response.headers.get('x-request-id')).toBeTruthy();
    expect(res.data.usage!.total_tokens).toBeGreaterThan(0);
    expect(lastRequest().conversation!.system).toBe('Be brief');
    await settled();
  });

  it('streams, with usage on the last chunk when include_usage is asked', async () => {
    fake.script({ type: 'text', text: 'one two three four', usage: { inputTokens: 7, outputTokens: 4 } });
    const stream = await ai.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'count' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('one two three four');
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage).toMatchObject({ prompt_tokens: 7, completion_tokens: 4, total_tokens: 11 });
    expect(chunks.at(-2)!.choices[0].finish_reason).toBe('stop');
    expect(chunks.slice(0, -1).every((c) => c.usage === null)).toBe(true);
    await settled();
  });

  it('passes tools through and returns the tool calls, streamed and not', async () => {
    const tools: OpenAI.Chat.ChatCompletionTool[] = [
      {
        type: 'function',
        function: { name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
      },
    ];
    fake.script({ type: 'tool_calls', toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: { city: 'Oslo' } }] });
    const plain = await ai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'weather?' }], tools });
    expect(lastRequest().conversation!.tools).toEqual(['get_weather']);
    expect(plain.choices[0].finish_reason).toBe('tool_calls');
    expect(plain.choices[0].message.tool_calls).toEqual([
      { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
    ]);

    // The tool's answer goes back with the assistant's call, and the model answers.
    const followUp = await ai.chat.completions.create({
      model: MODEL,
      tools,
      messages: [
        { role: 'user', content: 'weather?' },
        plain.choices[0].message as OpenAI.Chat.ChatCompletionMessageParam,
        { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
      ],
    });
    expect(followUp.choices[0].message.content).toBe(echoText('weather?'));
    const sent = lastRequest().conversation!.messages;
    expect(sent.map((m) => m.role)).toEqual(['user', 'assistant', 'tool']);
    expect(sent[1].toolCalls).toEqual([{ id: 'call_1', name: 'get_weather', arguments: '{"city":"Oslo"}' }]);

    fake.script({ type: 'tool_calls', toolCalls: [{ id: 'call_2', name: 'get_weather', arguments: { city: 'Rome' } }] });
    const stream = await ai.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'and Rome?' }],
      tools,
      stream: true,
    });
    const calls: OpenAI.Chat.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
    let finish: string | null = null;
    for await (const c of stream) {
      calls.push(...(c.choices[0]?.delta.tool_calls ?? []));
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    expect(finish).toBe('tool_calls');
    expect(calls).toEqual([{ index: 0, id: 'call_2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } }]);
    await settled();
  });

  it('ends a stream cut after its first token with an error and no [DONE]', async () => {
    fake.script({ type: 'cut', afterChunks: 3, text: 'alpha beta gamma delta epsilon' });
    const res = await fetch(`${stack.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'cut me' }], stream: true }),
    });
    const text = await res.text();
    const data = text
      .split('\n\n')
      .filter((l) => l.startsWith('data: '))
      .map((l) => l.slice(6));
    expect(data).not.toContain('[DONE]');
    const last = JSON.parse(data.at(-1)!);
    expect(last.error).toMatchObject({ type: 'server_error', message: expect.any(String), code: expect.stringMatching(/^llm_/) });
    expect(data.slice(0, -1).some((d) => JSON.parse(d).choices?.[0]?.delta?.content)).toBe(true);
    // The openai package turns that last event into a thrown error.
    fake.script({ type: 'cut', afterChunks: 3, text: 'alpha beta gamma delta epsilon' });
    const stream = await ai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'cut me' }], stream: true });
    await expect(
      (async () => {
        for await (const c of stream) void c;
      })(),
    ).rejects.toBeInstanceOf(OpenAI.APIError);
    await settled();
  });

  it('answers a call that fails before its first token with an HTTP error, streamed or not', async () => {
    for (const stream of [false, true]) {
      fake.script({ type: 'error', status: 503, times: 3 });
      const err = (await ai.chat.completions
        .create({ model: MODEL, messages: [{ role: 'user', content: 'fail' }], stream })
        .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
      expect(err).toBeInstanceOf(OpenAI.InternalServerError);
      expect(err.status).toBe(503);
      expect(err.error).toMatchObject({ type: 'server_error', code: 'llm_unavailable' });
    }
    await settled();
  });
});

describe('embeddings', () => {
  it("embeds on the tenant's default model through the official client (base64 by default, decoded by it)", async () => {
    const input = ['one', 'three words here'];
    const res = await ai.embeddings.create({ model: MODEL, input });
    expect(res.object).toBe('list');
    expect(res.model).toBe(MODEL);
    expect(res.data.map((d) => d.index)).toEqual([0, 1]);
    res.data.forEach((d, i) => d.embedding.forEach((v, j) => expect(v).toBeCloseTo(fakeEmbedding(input[i])[j], 5)));
    expect(res.usage.prompt_tokens).toBeGreaterThan(0);
    expect(res.usage.total_tokens).toBe(res.usage.prompt_tokens);
    const sent = fake.requests.filter((r) => r.path.endsWith('/embeddings')).at(-1);
    expect(sent?.body).toMatchObject({ model: MODEL, input });
    expect(sent?.headers.authorization).toBe(`Bearer ${PROVIDER_KEY}`);
    await settled();
  });
});

describe('responses', () => {
  it('answers a response in the foreground, stored in a chat session', async () => {
    const res = await ai.responses.create({ model: MODEL, input: 'What is up?' }).withResponse();
    const r = res.data;
    expect(r).toMatchObject({ object: 'response', status: 'completed', model: MODEL, output_text: echoText('What is up?') });
    expect(res.response.headers.get('x-served-model')).toBe(MODEL);
    expect(r.id).toMatch(/^resp_/);
    expect(r.usage!.total_tokens).toBeGreaterThan(0);
    const again = await ai.responses.retrieve(r.id);
    expect(again.output_text).toBe(echoText('What is up?'));
    await settled();
  });

  it('runs in the background, polled to its end', async () => {
    fake.script({ type: 'text', text: 'slow and steady wins', delayMs: 100 });
    const started = await ai.responses.create({ model: MODEL, input: 'take your time', background: true });
    expect(started.status).toMatch(/^(queued|in_progress)$/);
    expect(started.background).toBe(true);
    let r = started;
    const seen = new Set<string>([r.status!]);
    await eventually(async () => {
      r = await ai.responses.retrieve(started.id);
      seen.add(r.status!);
      return r.status === 'completed';
    }, 10_000);
    expect(r.output_text).toBe('slow and steady wins');
    expect(seen.has('in_progress') || seen.has('queued')).toBe(true);
    await settled();
  });

  it('streams numbered events ending in response.completed', async () => {
    fake.script({ type: 'text', text: 'a b c' });
    const stream = await ai.responses.create({ model: MODEL, input: 'stream it', stream: true });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const e of stream) events.push(e);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    expect(events.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    const done = events.at(-1) as OpenAI.Responses.ResponseCompletedEvent;
    expect(done.response.output_text ?? done.response.output).toBeDefined();
    expect((done.response.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0]).toMatchObject({ text: 'a b c' });
    await settled();
  });

  it('keeps a response with store: false only while it runs: no session, not retrievable, not continued', async () => {
    const r = await ai.responses.create({ model: MODEL, input: 'forget me', store: false });
    expect(r).toMatchObject({ status: 'completed', output_text: echoText('forget me'), store: false });
    expect((r as unknown as { conversation: unknown }).conversation).toBeNull();
    expect(await ai.responses.retrieve(r.id).catch((e: unknown) => e)).toBeInstanceOf(OpenAI.NotFoundError);
    const next = (await ai.responses
      .create({ model: MODEL, input: 'again', previous_response_id: r.id })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(next).toBeInstanceOf(OpenAI.NotFoundError);
    expect(next.error).toMatchObject({ param: 'previous_response_id' });
    const bg = (await ai.responses
      .create({ model: MODEL, input: 'x', store: false, background: true })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(bg).toBeInstanceOf(OpenAI.BadRequestError);
    const sessions = (await api.get('/api/v1/chat/sessions?limit=100', { token: owner.accessToken })).body.data;
    expect(sessions.some((s: { title: string | null }) => s.title === 'forget me')).toBe(false);
    await settled();
  });

  it('cancels a background response, twice (idempotent)', async () => {
    fake.script({ type: 'hang' });
    const started = await ai.responses.create({ model: MODEL, input: 'never mind', background: true });
    await eventually(async () => fake.requests.length > 0);
    const first = await ai.responses.cancel(started.id);
    expect(first.status).toBe('cancelled');
    const second = await ai.responses.cancel(started.id);
    expect(second.status).toBe('cancelled');
    expect(second.id).toBe(first.id);
    expect((await ai.responses.retrieve(started.id)).status).toBe('cancelled');
    await settled();
  });

  it('resumes a stream dropped at event 10 with starting_after: 11..N, no gap, no duplicate', async () => {
    const words = Array.from({ length: 20 }, (_, i) => `w${i}`).join(' ');
    fake.script({ type: 'text', text: words, delayMs: 20 });
    const stream = await ai.responses.create({ model: MODEL, input: 'many words', stream: true });
    const first: OpenAI.Responses.ResponseStreamEvent[] = [];
    let id = '';
    for await (const e of stream) {
      first.push(e);
      if (e.type === 'response.created') id = e.response.id;
      if (e.sequence_number === 10) break; // the client drops the stream
    }
    expect(first.map((e) => e.sequence_number)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    const resumed: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const e of await ai.responses.retrieve(id, { stream: true, starting_after: 10 })) resumed.push(e);
    const seqs = resumed.map((e) => e.sequence_number);
    expect(seqs[0]).toBe(11);
    expect(seqs).toEqual(seqs.map((_, i) => 11 + i));
    expect(resumed.at(-1)!.type).toBe('response.completed');
    const text = [...first, ...resumed]
      .filter((e): e is OpenAI.Responses.ResponseTextDeltaEvent => e.type === 'response.output_text.delta')
      .map((e) => e.delta)
      .join('');
    expect(text).toBe(words);
    // A full replay numbers every event as the first readers got them.
    const replay: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const e of await ai.responses.retrieve(id, { stream: true })) replay.push(e);
    expect(replay.slice(11)).toEqual(resumed);
    expect(replay.slice(0, 11).map((e) => [e.sequence_number, e.type])).toEqual(first.map((e) => [e.sequence_number, e.type]));
    await settled();
  });

  it('ends a response cut after its first token with response.failed, never response.completed', async () => {
    fake.script({ type: 'cut', afterChunks: 3, text: 'alpha beta gamma delta epsilon' });
    const stream = await ai.responses.create({ model: MODEL, input: 'cut me', stream: true });
    const types: string[] = [];
    for await (const e of stream) types.push(e.type);
    expect(types).toContain('response.output_text.delta');
    expect(types.at(-1)).toBe('response.failed');
    expect(types).not.toContain('response.completed');
    await settled();
  });

  it('continues a conversation with previous_response_id, visible in the chat session (and back)', async () => {
    const first = await ai.responses.create({ model: MODEL, input: 'My name is Ada.' });
    const second = await ai.responses.create({ model: MODEL, input: 'What is my name?', previous_response_id: first.id });
    expect(second.previous_response_id).toBe(first.id);
    // The model saw the whole conversation.
    expect(lastRequest().conversation!.messages.map((m) => [m.role, m.text])).toEqual([
      ['user', 'My name is Ada.'],
      ['assistant', echoText('My name is Ada.')],
      ['user', 'What is my name?'],
    ]);
    const sessionId = (second as unknown as { conversation: { id: string } }).conversation.id;
    expect((first as unknown as { conversation: { id: string } }).conversation.id).toBe(sessionId);
    const messages = (await api.get(`/api/v1/chat/sessions/${sessionId}/messages`, { token: owner.accessToken })).body.data;
    expect(messages.map((m: any) => [m.role, m.content, m.status])).toEqual([
      ['user', 'My name is Ada.', 'completed'],
      ['assistant', echoText('My name is Ada.'), 'completed'],
      ['user', 'What is my name?', 'completed'],
      ['assistant', echoText('What is my name?'), 'completed'],
    ]);
    // The other way round: a message posted through the chat API, then the conversation continued on /v1.
    const posted = await api.post(
      `/api/v1/chat/sessions/${sessionId}/messages`,
      { content: 'From the chat API' },
      { token: owner.accessToken },
    );
    expect(posted.status).toBe(202);
    await eventually(async () => {
      const list = (await api.get(`/api/v1/chat/sessions/${sessionId}/messages`, { token: owner.accessToken })).body.data;
      return list.at(-1).status === 'completed';
    });
    const third = await ai.responses.create({ model: MODEL, input: 'And now?', conversation: sessionId });
    expect(third.output_text).toBe(echoText('And now?'));
    expect(lastRequest().conversation!.messages.map((m) => m.text)).toContain('From the chat API');
    const fourth = await ai.responses.create({ model: MODEL, input: 'Last one', previous_response_id: posted.body.data.responseMessageId });
    expect((fourth as unknown as { conversation: { id: string } }).conversation.id).toBe(sessionId);
    await settled();
  });

  it('runs an agent: a run waiting for approval ends the response with an agent_approval_request carrying the run id', async () => {
    const t = { token: owner.accessToken };
    const project = (await api.post('/api/v1/projects', { name: 'Agent target', description: 'old' }, t)).body.data;
    const agent = (
      await api.post('/api/v1/agents', { name: 'Writer', systemPrompt: 'You edit projects', config: { autonomyLevel: 'supervised' } }, t)
    ).body.data;
    fake.script(
      { type: 'tool_calls', toolCalls: [{ name: 'update_project', arguments: { description: 'new text' } }] },
      { type: 'text', text: 'Done: the description is updated.' },
    );
    const r = await ai.responses.create({
      model: `agent:${agent.id}`,
      input: 'Update the description',
      metadata: { project_id: project.id },
    });
    expect(r.status).toBe('completed');
    expect(r.model).toBe(`agent:${agent.id}`);
    const item = r.output.find((o) => (o as { type: string }).type === 'agent_approval_request') as unknown as Record<string, string>;
    expect(item).toMatchObject({ type: 'agent_approval_request', agent_id: agent.id, name: 'update_project' });
    expect(JSON.parse(item.arguments)).toEqual({ description: 'new text' });
    const runId = item.run_id;
    expect((await api.get(`/api/v1/agents/${agent.id}/runs/${runId}`, t)).body.data.status).toBe('requires_approval');

    // Approved through the REST API; the next response follows the same run to its end.
    expect((await api.post(`/api/v1/agents/${agent.id}/runs/${runId}/approve`, undefined, t)).status).toBe(200);
    const next = await ai.responses.create({ model: `agent:${agent.id}`, input: 'continue', previous_response_id: r.id });
    expect(next.output_text).toBe('Done: the description is updated.');
    expect((await api.get(`/api/v1/projects/${project.id}`, t)).body.data.description).toBe('new text');

    // The decision may also come as the next response's input: rejected here, and the agent answers.
    fake.script(
      { type: 'tool_calls', toolCalls: [{ name: 'update_project', arguments: { description: 'unwanted' } }] },
      { type: 'text', text: 'Left it as it was.' },
    );
    const asked = await ai.responses.create({ model: `agent:${agent.id}`, input: 'Change it again', metadata: { project_id: project.id } });
    const request = asked.output.find((o) => (o as { type: string }).type === 'agent_approval_request') as unknown as Record<
      string,
      string
    >;
    const decided = await ai.responses.create({
      model: `agent:${agent.id}`,
      previous_response_id: asked.id,
      input: [{ type: 'agent_approval_response', approval_request_id: request.id, approve: false, reason: 'Keep it' }] as never,
    });
    expect(decided.output_text).toBe('Left it as it was.');
    const run = (await api.get(`/api/v1/agents/${agent.id}/runs/${request.run_id}`, t)).body.data;
    expect(run.steps.find((s: { toolName: string }) => s.toolName === 'update_project')).toMatchObject({ status: 'rejected' });
    expect((await api.get(`/api/v1/projects/${project.id}`, t)).body.data.description).toBe('new text');
    await settled();
  });
});

describe('fallbacks', () => {
  it('a model that fails before its first token falls back; the model that served is reported', async () => {
    const other = await signUp(api, 'Fallback tenant');
    const settings = await api.patch(
      '/api/v1/tenant/settings/llm',
      {
        provider: 'openai',
        baseUrl: fake.url,
        model: MODEL,
        apiKey: PROVIDER_KEY,
        fallbacks: [{ provider: 'openai', model: 'gpt-backup', baseUrl: fake.url, apiKey: PROVIDER_KEY }],
      },
      { token: other.accessToken },
    );
    expect(settings.status).toBe(200);
    const fb = openaiFor((await createKey(api, other.accessToken)).key);
    expect((await fb.models.list()).data.map((m) => m.id)).toEqual([MODEL, 'gpt-backup']);
    // The main model is down: every call to it answers 503.
    fake.setDefault((req) =>
      req.conversation?.model === MODEL ? { type: 'error', status: 503 } : { type: 'text', text: 'from the backup' },
    );
    try {
      const res = await fb.chat.completions
        .create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], stream: true })
        .withResponse();
      expect(res.response.headers.get('x-served-model')).toBe('gpt-backup');
      const chunks = [];
      for await (const c of res.data) chunks.push(c);
      expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('from the backup');
      expect(new Set(chunks.map((c) => c.model))).toEqual(new Set(['gpt-backup']));

      const plain = await fb.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }).withResponse();
      expect(plain.data.model).toBe('gpt-backup');
      expect(plain.response.headers.get('x-served-model')).toBe('gpt-backup');

      const r = await fb.responses.create({ model: MODEL, input: 'hi' }).withResponse();
      expect(r.data.model).toBe('gpt-backup');
      expect(r.data.output_text).toBe('from the backup');
      expect(r.response.headers.get('x-served-model')).toBe('gpt-backup');

      // Naming the fallback calls it first.
      const before = fake.requests.filter((q) => q.conversation?.model === MODEL).length;
      expect((await fb.chat.completions.create({ model: 'gpt-backup', messages: [{ role: 'user', content: 'x' }] })).model).toBe(
        'gpt-backup',
      );
      expect(fake.requests.filter((q) => q.conversation?.model === MODEL).length).toBe(before);
    } finally {
      fake.setDefault(undefined);
    }
    await eventually(
      async () => (await api.get('/api/v1/billing/summary', { token: other.accessToken })).body.data.credits.reserved === 0,
      10_000,
    );
  });
});

describe('agents', () => {
  it('cancelling a response on an agent cancels its run', async () => {
    const t = { token: owner.accessToken };
    const project = (await api.post('/api/v1/projects', { name: 'Cancelled agent' }, t)).body.data;
    const agent = (await api.post('/api/v1/agents', { name: 'Slow', systemPrompt: 'p', config: { autonomyLevel: 'manual' } }, t)).body.data;
    fake.script({ type: 'hang' });
    const r = await ai.responses.create({
      model: `agent:${agent.id}`,
      input: 'Think forever',
      background: true,
      metadata: { project_id: project.id },
    });
    const runs = async () => (await api.get(`/api/v1/agents/${agent.id}/runs`, t)).body.data;
    // Cancelled while its model call is under way (the provider hangs).
    await eventually(async () => (await runs())[0]?.status === 'running' && fake.requests.length > 0);
    expect((await ai.responses.cancel(r.id)).status).toBe('cancelled');
    await eventually(async () => (await runs())[0].status === 'cancelled');
    expect((await ai.responses.cancel(r.id)).status).toBe('cancelled');
    await settled();
  });

  it('caps the followers of a running agent run per key and per tenant: 100 at once on one key, 4 admitted; each holds a reservation until it ends', async () => {
    const t = { token: owner.accessToken };
    const project = (await api.post('/api/v1/projects', { name: 'Followed' }, t)).body.data;
    const agent = (await api.post('/api/v1/agents', { name: 'Followed', systemPrompt: 'p', config: { autonomyLevel: 'manual' } }, t)).body
      .data;
    const model = `agent:${agent.id}`;
    fake.script({ type: 'hang' });
    const first = await ai.responses.create({ model, input: 'Think forever', background: true, metadata: { project_id: project.id } });
    const runs = async () => (await api.get(`/api/v1/agents/${agent.id}/runs`, t)).body.data;
    await eventually(async () => (await runs())[0]?.status === 'running' && fake.requests.length > 0);
    const reserved = async () => (await api.get('/api/v1/billing/summary', t)).body.data.credits.reserved as number;
    const before = await reserved();

    type Outcome = OpenAI.Responses.Response | InstanceType<typeof OpenAI.APIError>;
    const follow = (client: OpenAI, n: number): Promise<Outcome[]> =>
      Promise.all(
        Array.from({ length: n }, () =>
          client.responses
            .create({ model, input: 'and then?', background: true, previous_response_id: first.id })
            .catch((e: unknown) => e as InstanceType<typeof OpenAI.APIError>),
        ),
      );
    const admitted = (outcomes: Outcome[]) => outcomes.filter((o) => !(o instanceof OpenAI.APIError)) as OpenAI.Responses.Response[];
    const refusals = (outcomes: Outcome[]) =>
      outcomes.filter((o) => o instanceof OpenAI.APIError).map((e) => [(e as InstanceType<typeof OpenAI.APIError>).status, e.error]);

    // One key: CHAT_RUN_FOLLOWERS_PER_KEY (4) follow, the other 96 are refused.
    const onKey = await follow(ai, 100);
    expect(admitted(onKey)).toHaveLength(4);
    expect(refusals(onKey)).toEqual(
      Array(96).fill([429, expect.objectContaining({ type: 'rate_limit_error', code: 'too_many_run_followers' })]),
    );
    // Other keys of the tenant: up to CHAT_RUN_FOLLOWERS_PER_TENANT (8) in all.
    const second = await follow(openaiFor((await createKey(api, owner.accessToken)).key), 10);
    const third = await follow(openaiFor((await createKey(api, owner.accessToken)).key), 10);
    expect(admitted(second)).toHaveLength(4);
    expect(admitted(third)).toHaveLength(0);
    // Each follower reserves like a call while it follows.
    expect(await reserved()).toBeGreaterThan(before);

    // The run ends (cancelled): every follower ends with it, and their holds go back.
    await ai.responses.cancel(first.id);
    for (const r of [...admitted(onKey), ...admitted(second)])
      await eventually(async () => (await ai.responses.retrieve(r.id)).status === 'failed');
    await settled();
  });

  it("runs an agent through Chat Completions: the run's output is the message; a run waiting for approval answers its run id", async () => {
    const t = { token: owner.accessToken };
    const project = (await api.post('/api/v1/projects', { name: 'Completion target', description: 'old' }, t)).body.data;
    const agent = (
      await api.post('/api/v1/agents', { name: 'Chatty', systemPrompt: 'You edit projects', config: { autonomyLevel: 'supervised' } }, t)
    ).body.data;
    const model = `agent:${agent.id}`;
    const metadata = { project_id: project.id };

    fake.script({ type: 'text', text: 'Nothing needs to change.' });
    const done = await ai.chat.completions.create({ model, messages: [{ role: 'user', content: 'Look at it' }], metadata }).withResponse();
    expect(done.response.headers.get('x-served-model')).toBe(model);
    expect(done.data.model).toBe(model);
    expect(done.data.choices[0]).toMatchObject({
      finish_reason: 'stop',
      message: { role: 'assistant', content: 'Nothing needs to change.' },
    });
    expect(lastRequest().conversation!.messages.map((m) => m.text)).toContain('Look at it');

    // Streamed, waiting for approval: a chunk carries the request with the run id, then finish_reason stop.
    fake.script({ type: 'tool_calls', toolCalls: [{ name: 'update_project', arguments: { description: 'via completions' } }] });
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
    for await (const c of await ai.chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'Change it' }],
      metadata,
      stream: true,
    }))
      chunks.push(c);
    const requests = chunks
      .map((c) => (c.choices[0]?.delta as { agent_approval_request?: Record<string, string> } | undefined)?.agent_approval_request)
      .filter(Boolean);
    expect(requests).toEqual([expect.objectContaining({ type: 'agent_approval_request', agent_id: agent.id, name: 'update_project' })]);
    expect(chunks.at(-1)!.choices[0].finish_reason).toBe('stop');
    const runId = requests[0]!.run_id;
    expect((await api.get(`/api/v1/agents/${agent.id}/runs/${runId}`, t)).body.data.status).toBe('requires_approval');
    expect((await api.post(`/api/v1/agents/${agent.id}/runs/${runId}/reject`, undefined, t)).status).toBe(200);
    await settled();
  });

  it('needs a project for a new run, on Responses and Chat Completions', async () => {
    const agent = (await api.post('/api/v1/agents', { name: 'Lost', systemPrompt: 'p', config: {} }, { token: owner.accessToken })).body
      .data;
    const noProject = (await ai.responses.create({ model: `agent:${agent.id}`, input: 'go' }).catch((e: unknown) => e)) as InstanceType<
      typeof OpenAI.APIError
    >;
    expect(noProject).toBeInstanceOf(OpenAI.BadRequestError);
    expect(noProject.error).toMatchObject({ code: 'project_required', param: 'metadata.project_id' });
    const completion = (await ai.chat.completions
      .create({ model: `agent:${agent.id}`, messages: [{ role: 'user', content: 'go' }] })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(completion).toBeInstanceOf(OpenAI.BadRequestError);
    expect(completion.error).toMatchObject({ code: 'project_required', param: 'metadata.project_id' });
    const unknown = (await ai.responses.create({ model: 'agent:agt_nope', input: 'go' }).catch((e: unknown) => e)) as InstanceType<
      typeof OpenAI.APIError
    >;
    expect(unknown).toBeInstanceOf(OpenAI.NotFoundError);
    expect(unknown.error).toMatchObject({ code: 'model_not_found' });
  });
});

describe('access and errors in OpenAI shape', () => {
  it('refuses a user token with 401', async () => {
    const asUser = openaiFor(owner.accessToken);
    const err = await asUser.models.list().then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
    const raw = await fetch(`${stack.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${owner.accessToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(raw.status).toBe(401);
    const body = await raw.json();
    expect(body).toEqual({ error: { message: expect.any(String), type: 'authentication_error', code: expect.any(String), param: null } });
    expect(raw.headers.get('x-request-id')).toBeTruthy();
    const cookie = await fetch(`${stack.url}/v1/models`, { headers: { cookie: owner.cookie } });
    expect(cookie.status).toBe(401);
  });

  it('refuses a key without llm:use with 403, and lets a key with only llm:use in', async () => {
    const scoped = (await createKey(api, owner.accessToken, { scopes: ['projects:read'] })).key;
    const err = (await openaiFor(scoped)
      .chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(err).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect(err.error).toEqual({ message: expect.any(String), type: 'permission_error', code: 'missing_scope', param: null });
    const llmOnly = (await createKey(api, owner.accessToken, { scopes: ['llm:use'] })).key;
    const ok = await openaiFor(llmOnly).chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'scoped' }] });
    expect(ok.choices[0].message.content).toBe(echoText('scoped'));
    await settled();
  });

  it('answers 402 in OpenAI shape when the credits do not cover the call', async () => {
    const poor = (await createKey(api, owner.accessToken, { limits: { creditBudget: { credits: 1, period: 'total' } } })).key;
    const err = (await openaiFor(poor)
      .responses.create({ model: MODEL, input: 'expensive' })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(err.status).toBe(402);
    expect(err.error).toEqual({ message: expect.any(String), type: 'insufficient_quota', code: 'key_budget_exhausted', param: null });
    expect(err.requestID ?? err.headers?.get('x-request-id')).toBeTruthy();
  });

  it("applies the key's limits: concurrency, requests and tokens per minute (429 in OpenAI shape)", async () => {
    const one = openaiFor((await createKey(api, owner.accessToken, { limits: { concurrency: 1 } })).key);
    fake.script({ type: 'hang' });
    const busy = await one.responses.create({ model: MODEL, input: 'hold the place', background: true });
    await eventually(async () => fake.requests.length > 0);
    const refused = (await one.chat.completions
      .create({ model: MODEL, messages: [{ role: 'user', content: 'second' }] })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(refused).toBeInstanceOf(OpenAI.RateLimitError);
    expect(refused.error).toMatchObject({ type: 'rate_limit_error', code: 'key_concurrency' });
    await one.responses.cancel(busy.id);
    expect(
      (await one.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'now' }] })).choices[0].message.content,
    ).toBe(echoText('now'));

    const rpm = (await createKey(api, owner.accessToken, { limits: { requestsPerMinute: 1 } })).key;
    expect((await openaiFor(rpm).models.list()).data.length).toBeGreaterThan(0);
    const limited = await fetch(`${stack.url}/v1/models`, { headers: { authorization: `Bearer ${rpm}` } });
    expect(limited.status).toBe(429);
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(((await limited.json()) as { error: unknown }).error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limit_exceeded' });

    const tpm = openaiFor((await createKey(api, owner.accessToken, { limits: { tokensPerMinute: 1 } })).key);
    await tpm.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'spend' }] });
    // Usage is counted when billing records the call: the next call of the minute is refused.
    await eventually(async () => {
      const e = await tpm.responses.create({ model: MODEL, input: 'more' }).then(
        () => null,
        (err: unknown) => err as InstanceType<typeof OpenAI.APIError>,
      );
      return e instanceof OpenAI.RateLimitError && (e.error as { code: string }).code === 'tokens_per_minute';
    });
    await settled();
  });

  it('answers an unknown model, a bad body and an unknown response in OpenAI shape', async () => {
    const unknown = (await ai.chat.completions
      .create({ model: 'gpt-nope', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(unknown).toBeInstanceOf(OpenAI.NotFoundError);
    expect(unknown.error).toMatchObject({ code: 'model_not_found', param: 'model', type: 'not_found_error' });
    const bad = (await ai.chat.completions.create({ model: MODEL, messages: [] }).catch((e: unknown) => e)) as InstanceType<
      typeof OpenAI.APIError
    >;
    expect(bad).toBeInstanceOf(OpenAI.BadRequestError);
    expect(bad.error).toMatchObject({ type: 'invalid_request_error', param: expect.stringMatching(/messages/) });
    const missing = (await ai.responses.retrieve('resp_doesnotexist').catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
    // Another tenant's response is invisible.
    const other = await signUp(api, 'Other');
    const otherKey = (await createKey(api, other.accessToken)).key;
    const mine = await ai.responses.create({ model: MODEL, input: 'mine' });
    expect(
      await openaiFor(otherKey)
        .responses.retrieve(mine.id)
        .catch((e: unknown) => e),
    ).toBeInstanceOf(OpenAI.NotFoundError);
    await settled();
  });
});
