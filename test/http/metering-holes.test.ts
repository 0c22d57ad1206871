/**
 * The metering holes of issue 31 on the gateway's own model-call paths (CONTRACT.md 8, 9, 11, 12): a streamed
 * pass-through is billed from its stream and held like any call; a pass-through GET is never billed; an output bound
 * is put in; a reservation bounds the prompt's tokens; a refused pass-through gives its hold back before it answers;
 * `/mcp` batches are refused; one stream cap, taken where it is checked, for every SSE route.
 */
import { startFakeAnthropic, startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, createKey, eventually, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

let stack: Stack;
let api: Client;
let openai: FakeProviderServer;
let anthropic: FakeProviderServer;
const OPENAI_KEY = 'sk-tenant-openai-' + 'h'.repeat(32);
const ANTHROPIC_KEY = 'sk-ant-tenant-' + 'h'.repeat(32);
const LLM = '/api/v1/tenant/settings/llm';
const CHAT = '/v1/passthrough/openai/chat/completions';
const MAX_STREAMS = 3;
const MAX_TOKENS = 64;

beforeAll(async () => {
  openai = await startFakeOpenAI({ apiKey: OPENAI_KEY });
  anthropic = await startFakeAnthropic({ apiKey: ANTHROPIC_KEY });
  stack = await startStack({
    env: {
      EGRESS_ALLOW_PRIVATE: 'true',
      SSE_STREAMS_PER_TENANT: String(MAX_STREAMS),
      LLM_MAX_TOKENS: String(MAX_TOKENS),
      CHAT_DRAIN_MS: '0',
    },
  });
  api = client(stack.url);
});
afterAll(async () => {
  // The fakes first: that cuts the calls still held open.
  await openai.close();
  await anthropic.close();
  await stack.stop();
});
beforeEach(() => {
  openai.reset();
  anthropic.reset();
  openai.setDefault(undefined);
});

/** A tenant whose LLM settings name both fakes, and an API key of it for the pass-through. */
async function tenant(name: string, limits?: Record<string, unknown>, baseUrl = openai.url) {
  const owner = await signUp(api, name);
  const saved = await api.patch(
    LLM,
    {
      provider: 'openai',
      model: 'gpt-chat',
      baseUrl,
      apiKey: OPENAI_KEY,
      fallbacks: [{ provider: 'anthropic', model: 'claude-x', baseUrl: anthropic.url, apiKey: ANTHROPIC_KEY }],
    },
    { token: owner.accessToken },
  );
  expect(saved.status).toBe(200);
  const key = await createKey(api, owner.accessToken, limits ? { limits } : {});
  return { owner, key };
}

const summary = async (owner: Account) =>
  (await api.get('/api/v1/billing/summary', { token: owner.accessToken })).body.data.credits as { reserved: number; balance: number };

/** The usage rows of the last hour, by model. */
async function usageRows(owner: Account): Promise<Array<{ model: string; calls: number; inputTokens: number; outputTokens: number }>> {
  const from = new Date(Date.now() - 3_600_000).toISOString();
  const to = new Date(Date.now() + 3_600_000).toISOString();
  return (await api.get(`/api/v1/billing/usage?from=${from}&to=${to}&groupBy=model`, { token: owner.accessToken })).body.data;
}
const rowOf = async (owner: Account, model: string) => (await usageRows(owner)).find((r) => r.model.endsWith(model));

/** A streamed request read to its end, as the client sees it. */
async function streamed(path: string, body: unknown, token: string) {
  const res = await fetch(stack.url + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text() };
}

/** Opens a stream and leaves it open; `close` ends it from the client's side. */
async function openStream(url: string, token: string, body?: unknown) {
  const controller = new AbortController();
  const res = await fetch(url, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: controller.signal,
  });
  if (res.status !== 200) await res.text();
  return { status: res.status, close: () => controller.abort() };
}

const chatBody = (model: string, extra: Record<string, unknown> = {}) => ({
  model,
  messages: [{ role: 'user', content: 'Say something short.' }],
  ...extra,
});

describe('streamed pass-through', () => {
  it("bills an OpenAI stream from its usage chunk, asked for on the caller's behalf and not shown to it", async () => {
    const { owner, key } = await tenant('Streamed');
    openai.script({ type: 'text', text: 'one two three', usage: { inputTokens: 1200, outputTokens: 800 } });
    const res = await streamed(CHAT, chatBody('gpt-streamed', { stream: true }), key.key);
    expect(res.status).toBe(200);
    expect(res.text).toContain('data: [DONE]');
    expect(res.text).not.toContain('prompt_tokens');
    expect(openai.requests[0].body).toMatchObject({ stream: true, stream_options: { include_usage: true } });
    await eventually(async () => (await rowOf(owner, 'gpt-streamed'))?.calls === 1, 10_000);
    expect(await rowOf(owner, 'gpt-streamed')).toMatchObject({ calls: 1, inputTokens: 1200, outputTokens: 800 });
    expect((await summary(owner)).reserved).toBe(0);
  });

  it('shows the usage chunk to a caller that asked for it', async () => {
    const { owner, key } = await tenant('Streamed usage');
    openai.script({ type: 'text', text: 'hello', usage: { inputTokens: 10, outputTokens: 5 } });
    const res = await streamed(CHAT, chatBody('gpt-asked', { stream: true, stream_options: { include_usage: true } }), key.key);
    expect(res.text).toContain('"prompt_tokens":10');
    await eventually(async () => (await rowOf(owner, 'gpt-asked'))?.calls === 1, 10_000);
  });

  it('bills an Anthropic stream from message_start and message_delta', async () => {
    const { owner, key } = await tenant('Streamed anthropic');
    anthropic.script({ type: 'text', text: 'a b c', usage: { inputTokens: 700, outputTokens: 300 } });
    const res = await streamed(
      '/v1/passthrough/anthropic/messages',
      { model: 'claude-streamed', max_tokens: 500, stream: true, messages: [{ role: 'user', content: 'hi' }] },
      key.key,
    );
    expect(res.status).toBe(200);
    expect(res.text).toContain('message_stop');
    await eventually(async () => (await rowOf(owner, 'claude-streamed'))?.calls === 1, 10_000);
    expect(await rowOf(owner, 'claude-streamed')).toMatchObject({ inputTokens: 700, outputTokens: 300 });
  });

  it('bills a stream cut midway from the tokens streamed so far', async () => {
    const { owner, key } = await tenant('Streamed cut');
    openai.script({ type: 'cut', afterChunks: 4, text: 'abcdefgh '.repeat(40), chunks: 10 });
    await streamed(CHAT, chatBody('gpt-cut', { stream: true }), key.key).catch(() => undefined);
    await eventually(async () => (await rowOf(owner, 'gpt-cut'))?.calls === 1, 10_000);
    const row = (await rowOf(owner, 'gpt-cut'))!;
    // 3 pieces of 36 characters streamed before the cut: 27 tokens at 4 characters a token.
    expect(row.outputTokens).toBeGreaterThanOrEqual(27);
    expect(row.inputTokens).toBeGreaterThan(0);
    await eventually(async () => (await summary(owner)).reserved === 0);
  });

  it("takes a place among the key's concurrent calls, freed when the stream ends", async () => {
    const { key } = await tenant('Streamed concurrency', { concurrency: 1 });
    openai.script({ type: 'text', text: 'held open', holdEndMs: 10_000 });
    const first = await openStream(stack.url + CHAT, key.key, chatBody('gpt-hang', { stream: true }));
    expect(first.status).toBe(200);
    const second = await api.post(CHAT, chatBody('gpt-hang'), { token: key.key });
    expect(second.status).toBe(429);
    expect(second.body.error.message).toMatch(/at most 1 calls/);
    first.close();
    // The client gone, the provider's stream is closed too (its generation stops).
    await eventually(async () => openai.requests[0].aborted);
    await eventually(async () => (await api.post(CHAT, chatBody('gpt-after'), { token: key.key })).status === 200);
  });

  it("honours the key's tokens per minute after a streamed call", async () => {
    const { owner, key } = await tenant('Streamed tpm', { tokensPerMinute: 100 });
    openai.script({ type: 'text', text: 'many tokens', usage: { inputTokens: 150, outputTokens: 50 } });
    expect((await streamed(CHAT, chatBody('gpt-tpm', { stream: true }), key.key)).status).toBe(200);
    // The stream's tokens are the key's: its next call waits for the next minute.
    await eventually(
      async () => (await api.get(`/api/v1/api-keys/${key.id}`, { token: owner.accessToken })).body.data.usage.tokensThisMinute >= 200,
      10_000,
    );
    const next = await api.post(CHAT, chatBody('gpt-tpm'), { token: key.key });
    expect(next.status).toBe(429);
    expect(openai.requests).toHaveLength(1);
  });
});

it('never bills a GET of a stored response', async () => {
  const { owner, key } = await tenant('Stored responses');
  for (let i = 0; i < 10; i++) {
    const res = await api.get('/v1/passthrough/openai/responses/resp_abc123', { token: key.key });
    expect(res.status).toBe(200);
    expect(res.body.usage).toMatchObject({ input_tokens: 20 });
  }
  // A POST after them is billed: the ledger is read after it, so the GETs had their chance to be counted.
  expect((await api.post(CHAT, chatBody('gpt-after-gets'), { token: key.key })).status).toBe(200);
  await eventually(async () => (await rowOf(owner, 'gpt-after-gets'))?.calls === 1, 10_000);
  expect((await usageRows(owner)).reduce((n, r) => n + r.calls, 0)).toBe(1);
  expect((await summary(owner)).reserved).toBe(0);
});

it('puts an output bound in a body without one, and leaves a given one', async () => {
  const { key } = await tenant('Output bound');
  expect((await api.post(CHAT, chatBody('gpt-bound'), { token: key.key })).status).toBe(200);
  expect(openai.requests[0].body).toMatchObject({ max_completion_tokens: MAX_TOKENS });
  expect((await api.post(CHAT, chatBody('gpt-bound', { max_tokens: 7 }), { token: key.key })).status).toBe(200);
  expect(openai.requests[1].body).toMatchObject({ max_tokens: 7 });
  expect(openai.requests[1].body).not.toHaveProperty('max_completion_tokens');
  await api.post(
    '/v1/passthrough/anthropic/messages',
    { model: 'claude-x', messages: [{ role: 'user', content: 'hi' }] },
    { token: key.key },
  );
  expect(anthropic.requests[0].body).toMatchObject({ max_tokens: MAX_TOKENS });
});

it('reserves at least what 60k CJK characters bill', async () => {
  const { owner, key } = await tenant('CJK');
  const prompt = '漢字仮名交じり文'.repeat(7500);
  // As the real tokenizer counts them (o200k_base: ~67,500 tokens), not 4 characters a token.
  openai.script({ type: 'text', text: 'ok', delayMs: 1500, usage: { inputTokens: 67_500, outputTokens: 20 } });
  const call = api.post(CHAT, chatBody('gpt-cjk', { messages: [{ role: 'user', content: prompt }] }), { token: key.key });
  let held = 0;
  await eventually(async () => (held = (await summary(owner)).reserved) > 0, 10_000, 20);
  expect((await call).status).toBe(200);
  await eventually(async () => (await rowOf(owner, 'gpt-cjk'))?.calls === 1, 10_000);
  const before = (await summary(owner)).balance;
  // What it billed (at CREDITS_PER_1K_TOKENS = 1), never more than what it held.
  const billed = Math.ceil((67_500 + 20) / 1000);
  expect(held).toBeGreaterThanOrEqual(billed);
  expect(before).toBeGreaterThanOrEqual(0);
});

it("gives a refused call's hold back before it answers", async () => {
  // A path the proxy refuses to build (a traversal), after the reservation.
  const bad = await tenant('Bad path');
  for (let i = 0; i < 3; i++) {
    const res = await api.post('/v1/passthrough/openai/chat%2F..%2Fembeddings', chatBody('gpt-bad-path'), { token: bad.key.key });
    expect(res.status).toBe(400);
    expect((await summary(bad.owner)).reserved).toBe(0);
  }
  expect(openai.requests).toHaveLength(0);

  // A provider nothing listens on: refused after the reservation, when the connection fails.
  const { owner, key } = await tenant('Refused', undefined, 'http://127.0.0.1:9/v1');
  for (let i = 0; i < 5; i++) {
    const res = await api.post(CHAT, chatBody('gpt-refused'), { token: key.key });
    expect(res.status).toBe(503);
    expect((await summary(owner)).reserved).toBe(0);
  }
});

it('refuses a JSON-RPC batch on /mcp with a JSON-RPC error, running none of it', async () => {
  const { key } = await tenant('MCP batch');
  const batch = Array.from({ length: 100 }, (_, i) => ({
    jsonrpc: '2.0',
    id: i + 1,
    method: 'tools/call',
    params: { name: 'list_projects', arguments: {} },
  }));
  const res = await api.post('/mcp', batch, { token: key.key, headers: { accept: 'application/json, text/event-stream' } });
  expect(res.status).toBe(400);
  expect(res.body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600, message: expect.stringMatching(/batch/i) } });
  // One message is answered as before.
  const one = await api.post('/mcp', batch[0], { token: key.key, headers: { accept: 'application/json, text/event-stream' } });
  expect(one.status).toBe(200);
  expect(one.body).toMatchObject({ jsonrpc: '2.0', id: 1, result: { content: expect.any(Array) } });
});

it('holds a burst of streams on every SSE route to exactly SSE_STREAMS_PER_TENANT', async () => {
  const { key } = await tenant('Stream burst');
  // Every call sends its text, then holds its end: a /v1 stream answers once its first token is there.
  openai.setDefault(() => ({ type: 'text', text: 'held open', holdEndMs: 10_000 }));
  // Pass-through streams and /v1 chat completion streams, all at once: one count for both.
  const burst = await Promise.all(
    Array.from({ length: 12 }, (_, i) =>
      i % 2 === 0
        ? openStream(stack.url + CHAT, key.key, chatBody('gpt-burst', { stream: true }))
        : openStream(stack.url + '/v1/chat/completions', key.key, chatBody('gpt-chat', { stream: true })),
    ),
  );
  const open = burst.filter((s) => s.status === 200);
  expect(burst.filter((s) => s.status === 429)).toHaveLength(12 - MAX_STREAMS);
  expect(open).toHaveLength(MAX_STREAMS);
  for (const s of open) s.close();
  // Closed streams free their places.
  openai.setDefault(undefined);
  await eventually(async () => (await streamed(CHAT, chatBody('gpt-burst', { stream: true }), key.key)).status === 200);
});
