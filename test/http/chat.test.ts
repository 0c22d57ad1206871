import { createClient, type EventBus, type RunningService, type ServiceClient } from '@svc/kit';
import { reservablePort } from '@svc/kit/ports';
import { startChat } from '@svc/chat';
import { chatV1 } from '@svc/proto';

type ChatClient = ServiceClient<typeof chatV1.ChatServiceService>;
import { decodeDomainEvent, TOPICS } from '@svc/contracts';
import { echoText, startFakeAnthropic, startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { joinedDeltas, readSse, type SseEvent } from '../helpers/sse';
import { stackBus, startStack, type Stack } from '../helpers/stack';

let stack: Stack;
let api: Client;
let openai: FakeProviderServer;
let anthropic: FakeProviderServer;
let owner: Account;
const OPENAI_KEY = 'sk-tenant-openai-' + 'q'.repeat(32);
const ANTHROPIC_KEY = 'sk-ant-tenant-' + 'z'.repeat(32);

const S = '/api/v1/chat/sessions';
const LLM = '/api/v1/tenant/settings/llm';

beforeAll(async () => {
  openai = await startFakeOpenAI();
  anthropic = await startFakeAnthropic();
  stack = await startStack({
    env: { EGRESS_ALLOW_PRIVATE: 'true', SSE_KEEPALIVE_MS: '100', CHAT_DRAIN_MS: '0', SSE_STREAMS_PER_TENANT: '3' },
  });
  api = client(stack.url);
  owner = await signUp(api, 'Chat');
  expect(
    (await api.patch(LLM, { provider: 'openai', baseUrl: openai.url, model: 'gpt-test', apiKey: OPENAI_KEY }, { token: owner.accessToken }))
      .status,
  ).toBe(200);
});
afterAll(async () => {
  await stack.stop();
  await openai.close();
  await anthropic.close();
});

async function newSession(token: string, body: Record<string, unknown> = {}): Promise<string> {
  const res = await api.post(S, body, { token });
  expect(res.status).toBe(201);
  return res.body.data.id;
}

async function post(token: string, sessionId: string, content: string) {
  const res = await api.post(`${S}/${sessionId}/messages`, { content }, { token });
  expect(res.status).toBe(202);
  return res.body.data as { message: any; responseMessageId: string };
}

const stream = (sessionId: string, token: string, options: Parameters<typeof readSse>[1] = {}) =>
  readSse(`${stack.url}${S}/${sessionId}/stream`, { token, ...options });

async function messagesOf(sessionId: string, token: string): Promise<any[]> {
  const res = await api.get(`${S}/${sessionId}/messages?limit=100`, { token });
  expect(res.status).toBe(200);
  return res.body.data;
}

async function storedReply(sessionId: string, token: string, id: string, until = ['completed', 'failed']): Promise<any> {
  let found: any;
  await eventually(async () => {
    found = (await messagesOf(sessionId, token)).find((m) => m.id === id);
    return until.includes(found?.status);
  });
  return found;
}

/** Every event has an id; deltas of one reply carry increasing offsets that match the text they add up to. */
function expectWellFormed(events: SseEvent[], startOffset = 0) {
  let offset = startOffset;
  for (const e of events) {
    expect(e.id).toEqual(expect.stringMatching(/^msg_\w+:\d+(:end)?$/));
    if (e.event === 'message.delta') {
      offset += e.data.delta.length;
      expect(Number(e.id!.split(':')[1])).toBe(offset);
    }
  }
  expect(['message.completed', 'error']).toContain(events[events.length - 1].event);
}

describe('chat sessions', () => {
  it('creates, reads and lists sessions; messages list oldest first', async () => {
    const project = (await api.post('/api/v1/projects', { name: 'Chatty' }, { token: owner.accessToken })).body.data;
    const created = await api.post(S, { projectId: project.id, title: ' Planning ' }, { token: owner.accessToken });
    expect(created.status).toBe(201);
    expect(created.body.data).toEqual({
      id: expect.stringMatching(/^chs_/),
      projectId: project.id,
      agentId: null,
      title: 'Planning',
      model: null,
      createdAt: expect.stringMatching(/Z$/),
    });
    const id = created.body.data.id;
    expect((await api.get(`${S}/${id}`, { token: owner.accessToken })).body.data).toEqual(created.body.data);
    const bare = await newSession(owner.accessToken);
    expect((await api.get(`${S}/${bare}`, { token: owner.accessToken })).body.data).toMatchObject({
      projectId: null,
      agentId: null,
      title: null,
    });
    const list = await api.get(`${S}?limit=1`, { token: owner.accessToken });
    expect(list.body.data.map((s: { id: string }) => s.id)).toEqual([bare]);
    const next = await api.get(`${S}?limit=1&cursor=${encodeURIComponent(list.body.meta.pagination.next_cursor)}`, {
      token: owner.accessToken,
    });
    expect(next.body.data.map((s: { id: string }) => s.id)).toEqual([id]);

    const first = await post(owner.accessToken, id, 'one');
    await storedReply(id, owner.accessToken, first.responseMessageId);
    const second = await post(owner.accessToken, id, 'two');
    await storedReply(id, owner.accessToken, second.responseMessageId);
    const page1 = await api.get(`${S}/${id}/messages?limit=3`, { token: owner.accessToken });
    const page2 = await api.get(`${S}/${id}/messages?limit=3&cursor=${encodeURIComponent(page1.body.meta.pagination.next_cursor)}`, {
      token: owner.accessToken,
    });
    const all = [...page1.body.data, ...page2.body.data];
    expect(all.map((m: any) => [m.role, m.content])).toEqual([
      ['user', 'one'],
      ['assistant', echoText('one')],
      ['user', 'two'],
      ['assistant', echoText('two')],
    ]);
    expect(all[0]).toMatchObject({ projectId: project.id, status: 'completed', error: null, usage: null, sessionId: id });
    // The model saw the whole conversation, oldest first.
    const last = openai.requests[openai.requests.length - 1];
    expect(last.conversation!.messages.map((m) => m.text)).toEqual(['one', echoText('one'), 'two']);
  });

  it('keeps sessions to their tenant and enforces agents:read / agents:write', async () => {
    const id = await newSession(owner.accessToken);
    const other = await signUp(api, 'Intruder');
    for (const res of [
      await api.get(`${S}/${id}`, { token: other.accessToken }),
      await api.get(`${S}/${id}/messages`, { token: other.accessToken }),
      await api.post(`${S}/${id}/messages`, { content: 'hi' }, { token: other.accessToken }),
      await api.get(`${S}/${id}/stream`, { token: other.accessToken }),
    ]) {
      expect(expectError(res, 404, 'RESOURCE_NOT_FOUND').details).toEqual({ resource: 'chat_session', id });
    }
    expect((await api.get(S, { token: other.accessToken })).body.data).toEqual([]);
    const foreignProject = (await api.post('/api/v1/projects', { name: 'mine' }, { token: owner.accessToken })).body.data.id;
    expect(
      expectError(await api.post(S, { projectId: foreignProject }, { token: other.accessToken }), 404, 'RESOURCE_NOT_FOUND').details,
    ).toEqual({ resource: 'project', id: foreignProject });
    const otherSession = await newSession(other.accessToken);
    expectError(
      await api.post(`${S}/${otherSession}/messages`, { content: 'x', projectId: foreignProject }, { token: other.accessToken }),
      404,
      'RESOURCE_NOT_FOUND',
    );

    const reader = await createKey(api, owner.accessToken, { scopes: ['agents:read'] });
    const writer = await createKey(api, owner.accessToken, { scopes: ['agents:write'] });
    expect((await api.get(`${S}/${id}`, { token: reader.key })).status).toBe(200);
    expect(expectError(await api.post(S, {}, { token: reader.key }), 403, 'FORBIDDEN').details.requiredScope).toBe('agents:write');
    expectError(await api.post(`${S}/${id}/messages`, { content: 'x' }, { token: reader.key }), 403, 'FORBIDDEN');
    expect((await api.post(S, {}, { token: writer.key })).status).toBe(201);
    expectError(await api.get(`${S}/${id}/stream`, { token: writer.key }), 403, 'FORBIDDEN');
    expectError(await api.get(S), 401, 'UNAUTHORIZED');
    expectError(await api.get(`${S}/${id}/stream`), 401, 'UNAUTHORIZED');
  });
});

describe('deleting a session', () => {
  it('deletes the session and its messages, only for its tenant, and not while a reply is being generated', async () => {
    const id = await newSession(owner.accessToken, { title: 'to delete' });
    openai.script({ type: 'text', text: 'one two three four five six', chunks: 6, delayMs: 150 });
    const posted = await post(owner.accessToken, id, 'hello');
    expect(expectError(await api.del(`${S}/${id}`, { token: owner.accessToken }), 409, 'CONFLICT').details).toEqual({
      reason: 'reply_in_progress',
    });
    await storedReply(id, owner.accessToken, posted.responseMessageId);

    const other = await signUp(api, 'Deleter');
    expect(expectError(await api.del(`${S}/${id}`, { token: other.accessToken }), 404, 'RESOURCE_NOT_FOUND').details).toEqual({
      resource: 'chat_session',
      id,
    });
    const reader = await createKey(api, owner.accessToken, { scopes: ['agents:read'] });
    expectError(await api.del(`${S}/${id}`, { token: reader.key }), 403, 'FORBIDDEN');

    const res = await api.del(`${S}/${id}`, { token: owner.accessToken });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ id, deleted: true });
    expectError(await api.get(`${S}/${id}`, { token: owner.accessToken }), 404, 'RESOURCE_NOT_FOUND');
    expectError(await api.get(`${S}/${id}/messages`, { token: owner.accessToken }), 404, 'RESOURCE_NOT_FOUND');
    expectError(await api.del(`${S}/${id}`, { token: owner.accessToken }), 404, 'RESOURCE_NOT_FOUND');
    expect((await api.get(`${S}?limit=100`, { token: owner.accessToken })).body.data.map((s: { id: string }) => s.id)).not.toContain(id);
  });
});

describe('chat with an agent', () => {
  it("leads the conversation with the agent's system prompt (and its model), and keeps agents to their tenant", async () => {
    const agentRes = await api.post(
      '/api/v1/agents',
      { name: 'Pirate', systemPrompt: 'You are a pirate. Answer like one.', config: { autonomyLevel: 'manual', model: 'gpt-pirate' } },
      { token: owner.accessToken },
    );
    expect(agentRes.status).toBe(201);
    const agent = agentRes.body.data;
    const created = await api.post(S, { agentId: agent.id, title: 'Ahoy' }, { token: owner.accessToken });
    expect(created.body.data).toMatchObject({ agentId: agent.id, title: 'Ahoy' });
    const posted = await post(owner.accessToken, created.body.data.id, 'where is the treasure?');
    await storedReply(created.body.data.id, owner.accessToken, posted.responseMessageId);
    const req = openai.requests[openai.requests.length - 1];
    expect(req.conversation!.system).toBe('You are a pirate. Answer like one.');
    expect(req.conversation!.model).toBe('gpt-pirate');
    expect(req.conversation!.messages.map((m) => [m.role, m.text])).toEqual([['user', 'where is the treasure?']]);

    const other = await signUp(api, 'AgentThief');
    expect(expectError(await api.post(S, { agentId: agent.id }, { token: other.accessToken }), 404, 'RESOURCE_NOT_FOUND').details).toEqual({
      resource: 'agent',
      id: agent.id,
    });
  });
});

describe('streamed replies', () => {
  it('streams an OpenAI reply as SSE; the deltas joined equal the stored message; usage is recorded and published', async () => {
    const id = await newSession(owner.accessToken);
    const text = 'The quick brown fox jumps over the lazy dog, twice over.';
    openai.script({ type: 'text', text, delayMs: 5, usage: { inputTokens: 11, outputTokens: 13 } });
    const before = openai.requests.length;
    const posted = await post(owner.accessToken, id, 'tell me about foxes');
    expect(posted.message).toMatchObject({ role: 'user', content: 'tell me about foxes', status: 'completed', sessionId: id });
    const res = await stream(id, owner.accessToken);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    expect(res.headers.get('cache-control')).toBe('no-cache, no-transform');
    expect(res.headers.get('x-accel-buffering')).toBe('no');
    expect(res.headers.get('x-request-id')).toMatch(/.+/);
    expect(res.headers.get('x-ratelimit-limit')).toMatch(/^\d+$/);
    expectWellFormed(res.events);
    expect(joinedDeltas(res.events)).toBe(text);
    const completed = res.events[res.events.length - 1];
    expect(completed.event).toBe('message.completed');
    expect(completed.data.message).toMatchObject({
      id: posted.responseMessageId,
      role: 'assistant',
      content: text,
      status: 'completed',
      usage: { inputTokens: 11, outputTokens: 13 },
    });
    const stored = await storedReply(id, owner.accessToken, posted.responseMessageId);
    expect(stored).toEqual(completed.data.message);

    // The tenant's key went to the provider, and nowhere back to the client.
    expect(openai.requests.slice(before).map((r) => r.headers.authorization)).toEqual([`Bearer ${OPENAI_KEY}`]);
    for (const body of [res.events.map((e) => JSON.stringify(e)).join(''), JSON.stringify(stored)]) expect(body).not.toContain(OPENAI_KEY);

    // llm.usage went out through the outbox for billing.
    const bus: EventBus = stackBus(stack, 'chat-test');
    const seen: any[] = [];
    const sub = await bus.subscribe({
      group: `chat-test-${Date.now()}`,
      topics: [TOPICS.chat],
      handler: async (m) => {
        seen.push(decodeDomainEvent(m.value));
      },
    });
    await eventually(async () => seen.some((e) => e.data?.value?.sourceId === posted.responseMessageId));
    await sub.stop();
    await bus.close();
    const usage = seen.find((e) => e.data?.value?.sourceId === posted.responseMessageId);
    expect(usage).toMatchObject({
      type: 'llm.usage',
      tenantId: owner.tenantId,
      data: {
        $case: 'usage',
        value: { source: 'chat_reply', provider: 'openai', model: 'gpt-test', inputTokens: 11, outputTokens: 13, keySource: 'tenant' },
      },
    });
  });

  it('streams an Anthropic reply the same way', async () => {
    const t = await signUp(api, 'Anthropic');
    await api.patch(
      LLM,
      { provider: 'anthropic', baseUrl: anthropic.url, model: 'claude-test', apiKey: ANTHROPIC_KEY },
      { token: t.accessToken },
    );
    const id = await newSession(t.accessToken);
    const text = 'Anthropic speaks in content blocks, delta by delta.';
    anthropic.script({ type: 'text', text, delayMs: 5 });
    const posted = await post(t.accessToken, id, 'hello claude');
    const res = await stream(id, t.accessToken);
    expectWellFormed(res.events);
    expect(joinedDeltas(res.events)).toBe(text);
    expect((await storedReply(id, t.accessToken, posted.responseMessageId)).content).toBe(text);
    const last = anthropic.requests[anthropic.requests.length - 1];
    expect(last.headers['x-api-key']).toBe(ANTHROPIC_KEY);
    expect(JSON.stringify(res.events)).not.toContain(ANTHROPIC_KEY);
  });

  it('resumes after Last-Event-ID with exactly the rest, and two readers each get the whole reply', async () => {
    const id = await newSession(owner.accessToken);
    const text = Array.from({ length: 30 }, (_, i) => `word${i}`).join(' ');
    openai.script({ type: 'text', text, delayMs: 20 });
    const posted = await post(owner.accessToken, id, 'count');
    const [first, second, partial] = await Promise.all([
      stream(id, owner.accessToken),
      stream(id, owner.accessToken),
      stream(id, owner.accessToken, { stopAfter: (events) => events.filter((e) => e.event === 'message.delta').length >= 5 }),
    ]);
    for (const r of [first, second]) {
      expectWellFormed(r.events);
      expect(joinedDeltas(r.events)).toBe(text);
    }
    expect(partial.hungUp).toBe(true);
    const head = joinedDeltas(partial.events);
    const lastId = partial.events[partial.events.length - 1].id!;
    const rest = await stream(id, owner.accessToken, { headers: { 'last-event-id': lastId } });
    expectWellFormed(rest.events, head.length);
    expect(joinedDeltas(rest.events)).toBe(text.slice(head.length));
    expect(head + joinedDeltas(rest.events)).toBe(text);
    expect((await storedReply(id, owner.accessToken, posted.responseMessageId)).content).toBe(text);

    // A finished reply is replayed whole, or from an event id (also given as ?lastEventId=); after the end, nothing.
    const replay = await stream(id, owner.accessToken);
    expectWellFormed(replay.events);
    expect(joinedDeltas(replay.events)).toBe(text);
    const mid = first.events[10];
    const tail = await readSse(`${stack.url}${S}/${id}/stream?lastEventId=${encodeURIComponent(mid.id!)}`, { token: owner.accessToken });
    expect(joinedDeltas(tail.events)).toBe(text.slice(Number(mid.id!.split(':')[1])));
    expect(tail.events[tail.events.length - 1].event).toBe('message.completed');
    const done = await stream(id, owner.accessToken, { headers: { 'last-event-id': replay.events[replay.events.length - 1].id! } });
    expect(done.status).toBe(200);
    expect(done.events).toEqual([]);
  });

  it('sends an error event and stores the reply as failed when the provider fails mid-stream', async () => {
    const id = await newSession(owner.accessToken);
    openai.script({ type: 'cut', afterChunks: 3, text: 'this reply never gets to its end' });
    const posted = await post(owner.accessToken, id, 'fail please');
    const res = await stream(id, owner.accessToken);
    expectWellFormed(res.events);
    const last = res.events[res.events.length - 1];
    expect(last.event).toBe('error');
    expect(last.data).toEqual({ code: 'LLM_UNAVAILABLE', message: expect.stringContaining('closed before the reply finished') });
    const stored = await storedReply(id, owner.accessToken, posted.responseMessageId);
    expect(stored).toMatchObject({ status: 'failed', error: { code: 'LLM_UNAVAILABLE' }, content: joinedDeltas(res.events) });
    // Replayed the same way.
    const again = await stream(id, owner.accessToken);
    expect(again.events[again.events.length - 1].data.code).toBe('LLM_UNAVAILABLE');
    // The next message is answered normally, and the failed reply is not sent back to the model.
    const next = await post(owner.accessToken, id, 'and now?');
    expect((await storedReply(id, owner.accessToken, next.responseMessageId)).content).toBe(echoText('and now?'));
    const conv = openai.requests[openai.requests.length - 1].conversation!;
    expect(conv.messages.map((m) => m.role)).toEqual(['user', 'user']);
  });

  it('finishes and stores the reply when the client hangs up mid-stream', async () => {
    const id = await newSession(owner.accessToken);
    const text = Array.from({ length: 20 }, (_, i) => `piece${i}`).join(' ');
    openai.script({ type: 'text', text, delayMs: 25 });
    const posted = await post(owner.accessToken, id, 'go on without me');
    const partial = await stream(id, owner.accessToken, { stopAfter: (events) => events.some((e) => e.event === 'message.delta') });
    expect(partial.hungUp).toBe(true);
    expect(partial.events.some((e) => e.event === 'message.completed')).toBe(false);
    expect(await storedReply(id, owner.accessToken, posted.responseMessageId)).toMatchObject({ status: 'completed', content: text });
  });

  it('holds a tenant to SSE_STREAMS_PER_TENANT open streams; others are not affected, and a closed one frees its place', async () => {
    const id = await newSession(owner.accessToken);
    openai.script({ type: 'text', text: 'one two three four five six', chunks: 6, delayMs: 200 });
    await post(owner.accessToken, id, 'talk slowly');
    const opened: Array<Promise<void>> = [];
    const readers = [0, 1, 2].map(() => {
      let signal!: () => void;
      opened.push(new Promise<void>((resolve) => (signal = resolve)));
      return stream(id, owner.accessToken, { stopAfter: (events) => (events.length === 1 && signal(), false) });
    });
    await Promise.all(opened);
    const fourth = await stream(id, owner.accessToken);
    expect(fourth.status).toBe(429);
    expect(fourth.body.error).toMatchObject({ code: 'RATE_LIMIT_EXCEEDED', details: { reason: 'too_many_streams', limit: 3 } });
    const other = await signUp(api, 'Other streamer');
    const otherSession = await newSession(other.accessToken);
    expect((await stream(otherSession, other.accessToken)).status).not.toBe(429);
    for (const r of await Promise.all(readers)) expect(joinedDeltas(r.events)).toBe('one two three four five six');
    expect((await stream(id, owner.accessToken)).status).toBe(200);
  });

  it('counts /v1, REST chat and /mcp streams against the one SSE_STREAMS_PER_TENANT; closing one frees a place', async () => {
    const t = await signUp(api, 'Streams on every API');
    await api.patch(LLM, { provider: 'openai', baseUrl: openai.url, model: 'gpt-test', apiKey: OPENAI_KEY }, { token: t.accessToken });
    const key = (await createKey(api, t.accessToken)).key;
    // Streams that outlast the checks (each is cancelled, or hung up on, at the end).
    const words = Array.from({ length: 60 }, (_, i) => `w${i}`).join(' ');
    for (let i = 0; i < 3; i++) openai.script({ type: 'text', text: words, chunks: 60, delayMs: 500 });
    const v1 = () =>
      fetch(`${stack.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-test', stream: true, messages: [{ role: 'user', content: 'talk slowly' }] }),
      });
    // MCP's Streamable HTTP GET: the server's event stream, open until its client leaves.
    const mcp = () => fetch(`${stack.url}/mcp`, { headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream' } });
    const refusal = { code: 'RATE_LIMIT_EXCEEDED', details: { reason: 'too_many_streams', limit: 3 } };

    // One stream of each kind holds the tenant's three places.
    const heldV1 = await v1();
    const heldMcp = await mcp();
    expect([heldV1.status, heldMcp.status]).toEqual([200, 200]);
    expect(heldMcp.headers.get('content-type')).toContain('text/event-stream');
    const id = await newSession(t.accessToken);
    await post(t.accessToken, id, 'talk slowly');
    let opened!: () => void;
    const whenOpened = new Promise<void>((resolve) => (opened = resolve));
    let checked = false;
    const rest = stream(id, t.accessToken, { stopAfter: (events) => (events.length === 1 && opened(), checked) });
    await whenOpened;

    // The next stream of any kind is refused.
    const refusedV1 = await v1();
    expect(refusedV1.status).toBe(429);
    expect(await refusedV1.text()).toContain('too_many_streams');
    const refusedRest = await stream(await newSession(t.accessToken), t.accessToken);
    expect(refusedRest.status).toBe(429);
    expect(refusedRest.body.error).toMatchObject(refusal);
    const refusedMcp = await mcp();
    expect(refusedMcp.status).toBe(429);
    expect(((await refusedMcp.json()) as { error: unknown }).error).toMatchObject(refusal);

    // Closing the /mcp stream frees its place, which a stream of another kind takes; then the cap holds again.
    await heldMcp.body!.cancel();
    let again!: Response;
    await eventually(async () => {
      again = await v1();
      if (again.status === 200) return true;
      await again.body?.cancel();
      return false;
    });
    const full = await mcp();
    expect(full.status).toBe(429);
    await full.body?.cancel();
    checked = true;
    for (const r of [heldV1, again]) await r.body!.cancel();
    expect((await rest).hungUp).toBe(true);
    // Every place is free again once the streams closed.
    await eventually(async () => {
      const free = await mcp();
      await free.body?.cancel();
      return free.status === 200;
    });
  });

  it('keeps an idle stream alive with comment lines', async () => {
    const id = await newSession(owner.accessToken);
    openai.script({ type: 'text', text: 'slow and steady', chunks: 2, delayMs: 150 });
    await post(owner.accessToken, id, 'take your time');
    const res = await stream(id, owner.accessToken);
    expect(joinedDeltas(res.events)).toBe('slow and steady');
    expect(res.comments).toBeGreaterThan(0);
  });
});

describe('chat input', () => {
  it('answers llm_not_configured before storing anything', async () => {
    const t = await signUp(api, 'NoLlm');
    const id = await newSession(t.accessToken);
    const err = expectError(
      await api.post(`${S}/${id}/messages`, { content: 'hello?' }, { token: t.accessToken }),
      400,
      'VALIDATION_ERROR',
    );
    expect(err.details.reason).toBe('llm_not_configured');
    expect(await messagesOf(id, t.accessToken)).toEqual([]);
    expect(expectError(await api.get(`${S}/${id}/stream`, { token: t.accessToken }), 409, 'CONFLICT').details.reason).toBe('no_reply');
  });

  it('refuses bad input with a 4xx, never a 500', async () => {
    const id = await newSession(owner.accessToken);
    const M = `${S}/${id}/messages`;
    const token = owner.accessToken;
    const cases: Array<[string, Promise<any>, number]> = [
      ['content missing', api.post(M, {}, { token }), 400],
      ['content a number', api.post(M, { content: 42 }, { token }), 400],
      ['content null', api.post(M, { content: null }, { token }), 400],
      ['content empty', api.post(M, { content: '' }, { token }), 400],
      ['content blank', api.post(M, { content: '   \n ' }, { token }), 400],
      ['content too long', api.post(M, { content: 'x'.repeat(32_001) }, { token }), 400],
      ['body over 1 MiB', api.post(M, { content: 'x'.repeat(1_100_000) }, { token }), 413],
      ['unknown field', api.post(M, { content: 'hi', role: 'system' }, { token }), 400],
      ['projectId a number', api.post(M, { content: 'hi', projectId: 7 }, { token }), 400],
      ['unknown projectId', api.post(M, { content: 'hi', projectId: 'prj_nope' }, { token }), 404],
      ['malformed JSON', api.request('POST', M, { raw: '{"content":', headers: { 'content-type': 'application/json' }, token }), 400],
      ['session: unknown field', api.post(S, { title: 'x', tenantId: 'ten_x' }, { token }), 400],
      ['session: title a list', api.post(S, { title: ['x'] }, { token }), 400],
      ['session: title too long', api.post(S, { title: 'x'.repeat(201) }, { token }), 400],
      ['session: unknown agent', api.post(S, { agentId: 'agt_nope' }, { token }), 404],
      ['session: empty projectId', api.post(S, { projectId: '' }, { token }), 400],
      ['unknown session', api.post(`${S}/chs_nope/messages`, { content: 'hi' }, { token }), 404],
      ['list: bad limit', api.get(`${M}?limit=1000`, { token }), 400],
      ['list: bad cursor', api.get(`${M}?cursor=garbage`, { token }), 400],
      ['stream: bad Last-Event-ID', api.get(`${S}/${id}/stream`, { token, headers: { 'last-event-id': 'nonsense' } }), 400],
    ];
    const results = await Promise.all(cases.map(([, p]) => p));
    const got = cases.map(([name], i) => [name, results[i].status, results[i].body?.error?.code !== undefined]);
    expect(got).toEqual(cases.map(([name, , status]) => [name, status, true]));
  });
});

describe('a reply generated by another chat process', () => {
  // Two more chat processes on the stack's store: `maker` generates the replies, `reader` serves their streams and
  // polls the store only every 10 s, so only the relay from `maker` can give a reader a reply chunk by chunk (a store
  // poll would have sent what it found in one or two pieces, 10 s later).
  let maker: RunningService;
  let reader: RunningService;
  let toMaker: ChatClient;
  let toReader: ChatClient;
  beforeAll(async () => {
    const ports = [await reservablePort(), await reservablePort()];
    const chatAt = (port: number, extra: Record<string, string>) =>
      startChat({ ...stack.env, CHAT_PORT: String(port), CHAT_PEER_ADDR: `127.0.0.1:${port}`, CHAT_POLL_MS: '10000', ...extra });
    maker = await chatAt(ports[0], { CHAT_FLUSH_MS: '10' });
    reader = await chatAt(ports[1], {});
    [toMaker, toReader] = ports.map((p) => createClient(chatV1.ChatServiceService, `127.0.0.1:${p}`, { deadlineMs: 10_000 }));
  });
  afterAll(async () => {
    toMaker?.close();
    toReader?.close();
    await reader?.stop();
    await maker?.stop();
  });
  const words = (n: number, tag: string) => Array.from({ length: n }, (_, i) => `${tag}${i}`).join(' ');

  it('relays a REST chat stream live from the process generating it (CHAT_PEER_ADDR), not polled from the store', async () => {
    const token = owner.accessToken;
    const sessionId = await newSession(token);
    const text = words(12, 'w');
    openai.script({ type: 'text', text, delayMs: 40 });
    await toMaker.postMessage({ sessionId, content: 'hello', projectId: '', model: '', endUser: '' }, { token });
    const events: chatV1.StreamReplyResponse[] = [];
    for await (const m of toReader.streamReply({ sessionId, afterEventId: '' }, { token, deadlineMs: 30_000 })) events.push(m);
    const deltas = events.filter((e) => e.type === 'message.delta');
    expect(events[0].type).toBe('open');
    expect(events.at(-1)!.type).toBe('message.completed');
    expect(deltas.map((d) => d.delta).join('')).toBe(text);
    expect(deltas.length).toBeGreaterThan(3);
    // Each id is the offset its delta ends at: no gap and no repeat across the relay.
    let at = 0;
    for (const d of deltas) {
      at += d.delta.length;
      expect(d.id).toBe(`${d.messageId}:${at}`);
    }
  });

  it("relays a response's stream resumed by id the same way (StreamResponse)", async () => {
    const token = owner.accessToken;
    const text = words(12, 'r');
    openai.script({ type: 'text', text, delayMs: 40 });
    const call = toMaker.startCall(
      chatV1.StartCallRequest.fromPartial({ kind: 'response', model: 'gpt-test', store: true, input: [{ role: 'user', content: 'hi' }] }),
      { token, deadlineMs: 30_000 },
    );
    const made = call[Symbol.asyncIterator]();
    const started = (await made.next()).value!.event!;
    expect(started.type).toBe('started');
    // The maker's own stream, read to its end meanwhile: the reader's first chunk must come while the reply still runs.
    let makerDone = false;
    const drained = (async () => {
      for (let next = await made.next(); !next.done; next = await made.next()) if (next.value.event?.type === 'done') makerDone = true;
    })();
    const events: chatV1.CallEvent[] = [];
    let doneBeforeFirstChunk: boolean | null = null;
    for await (const m of toReader.streamResponse({ id: started.call!.id, fromChunk: 0 }, { token, deadlineMs: 30_000 })) {
      if (m.event!.type === 'delta' && doneBeforeFirstChunk === null) doneBeforeFirstChunk = makerDone;
      events.push(m.event!);
    }
    await drained;
    expect(doneBeforeFirstChunk).toBe(false);
    const deltas = events.filter((e) => e.type === 'delta');
    expect(events.at(-1)!.type).toBe('done');
    expect(events.at(-1)!.call!.status).toBe('completed');
    expect(deltas.map((d) => d.delta).join('')).toBe(text);
    expect(deltas.map((d) => d.index)).toEqual(deltas.map((_, i) => i));
  });
});
