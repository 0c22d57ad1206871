import { CircuitBreaker } from './breaker';
import { createModelChain, type ServedModel } from './fallback';
import { drain, llmError, startFakeAnthropic, startFakeOpenAI, type FakeProviderServer } from './testing';
import type { LlmSettings } from './types';

let a: FakeProviderServer;
let b: FakeProviderServer;
let c: FakeProviderServer;

beforeAll(async () => {
  [a, b] = await Promise.all([startFakeOpenAI(), startFakeOpenAI()]);
  c = await startFakeAnthropic({ apiKey: 'ak-fallback' });
});
afterEach(() => {
  a.reset();
  b.reset();
  c.reset();
});
afterAll(async () => {
  await Promise.all([a.close(), b.close(), c.close()]);
});

const ask = { messages: [{ role: 'user' as const, content: 'hello' }] };
const chats = (fake: FakeProviderServer) =>
  fake.requests.filter((r) => r.path.endsWith('/chat/completions') || r.path.endsWith('/messages')).length;

function chain(breaker?: CircuitBreaker, extra: Partial<LlmSettings> = {}) {
  const candidates: LlmSettings[] = [
    { provider: 'openai-compatible', baseUrl: a.url, model: 'main', timeoutMs: 500, ...extra },
    { provider: 'openai-compatible', baseUrl: b.url, model: 'second', timeoutMs: 500, ...extra },
    { provider: 'anthropic', baseUrl: c.url, apiKey: 'ak-fallback', model: 'third', timeoutMs: 500, ...extra },
  ];
  return createModelChain(candidates, { breaker, scope: 'tenant_1', maxRetries: 2 });
}

async function run(ch: ReturnType<typeof chain>) {
  const served: ServedModel[] = [];
  const out = await drain(ch.stream(ask, { onServed: (s) => served.push(s) }));
  return { ...out, served };
}

test.each([
  ['a 503', { type: 'error', status: 503 }],
  ['a 429 with a long Retry-After', { type: 'error', status: 429, retryAfter: 120 }],
  ['a hang before the headers', { type: 'hang', stage: 'headers' }],
  ['a hang after the headers', { type: 'hang', stage: 'body' }],
  ['a cut before the first token', { type: 'cut', afterChunks: 0 }],
  ['a clean end before the first token', { type: 'cut', afterChunks: 0, mode: 'end' }],
] as const)('%s on the main model moves on to the next, which serves the whole answer', async (_name, behaviour) => {
  a.script(behaviour as never);
  const started = Date.now();
  const { text, error, served } = await run(chain());
  expect(error).toBeUndefined();
  expect(text).toBe('Echo: hello');
  expect(served).toEqual([{ provider: 'openai-compatible', model: 'second', index: 1 }]);
  expect(chats(a)).toBe(1); // not retried: the next model is its retry
  expect(b.requests[0].conversation?.model).toBe('second');
  expect(Date.now() - started).toBeLessThan(5_000); // the long Retry-After was not slept through
});

test('two failing models: the third (another provider) answers', async () => {
  a.script({ type: 'error', status: 500 });
  b.script({ type: 'error', status: 502 });
  const { text, served } = await run(chain());
  expect(text).toBe('Echo: hello');
  expect(served).toEqual([{ provider: 'anthropic', model: 'third', index: 2 }]);
});

test('a cut after the first token is an error, and no other model is asked', async () => {
  a.script({ type: 'cut', afterChunks: 2, text: 'one two three four five' });
  const { text, error, served } = await run(chain());
  expect(text.length).toBeGreaterThan(0);
  expect(llmError(error).kind).toBe('unavailable');
  expect(served).toEqual([{ provider: 'openai-compatible', model: 'main', index: 0 }]);
  expect(chats(b) + chats(c)).toBe(0);
});

test('errors that are not the model failing (401, 400) are not passed to a fallback', async () => {
  a.script({ type: 'error', status: 400 });
  const { error } = await run(chain());
  expect(llmError(error).kind).toBe('bad_request');
  expect(chats(b)).toBe(0);
});

test('every model failing: an explicit error naming the attempts', async () => {
  a.script({ type: 'error', status: 503 });
  b.script({ type: 'error', status: 503 });
  c.script({ type: 'error', status: 529, times: 3 });
  const { error } = await run(chain());
  const e = llmError(error);
  expect(e.kind).toBe('unavailable');
  expect(e.message).toMatch(/5 attempts on 3 models/); // the last model retried twice
});

test('the last model is not retried after a timeout (each try would cost the whole timeout)', async () => {
  const single = createModelChain([{ provider: 'openai-compatible', baseUrl: a.url, model: 'main', timeoutMs: 300 }], {
    scope: 't',
    maxRetries: 2,
  });
  a.script({ type: 'hang', stage: 'headers' });
  expect(llmError((await drain(single.stream(ask))).error).kind).toBe('timeout');
  expect(chats(a)).toBe(1);
});

test('the last model honours Retry-After before retrying', async () => {
  const single = createModelChain([{ provider: 'openai-compatible', baseUrl: a.url, model: 'main' }], { scope: 't', maxRetries: 2 });
  a.script({ type: 'error', status: 429, retryAfter: 1 });
  const started = Date.now();
  const { text } = await drain(single.stream(ask));
  expect(text).toBe('Echo: hello');
  expect(Date.now() - started).toBeGreaterThanOrEqual(950);
  expect(chats(a)).toBe(2);
});

test('the breaker skips an open model with no attempt, then half-opens after the cooldown', async () => {
  let now = 0;
  const breaker = new CircuitBreaker({ failures: 2, windowMs: 60_000, cooldownMs: 30_000, now: () => now });
  a.setDefault(() => ({ type: 'error', status: 503 }));
  for (let i = 0; i < 2; i++) expect((await run(chain(breaker))).served[0].index).toBe(1);
  expect(chats(a)).toBe(2);
  // Open: the main model is not asked at all.
  for (let i = 0; i < 3; i++) expect((await run(chain(breaker))).served[0].index).toBe(1);
  expect(chats(a)).toBe(2);
  // After the cooldown one trial goes to it; it answers now, so the circuit closes.
  now += 30_000;
  a.setDefault(undefined);
  expect((await run(chain(breaker))).served).toEqual([{ provider: 'openai-compatible', model: 'main', index: 0 }]);
  expect(chats(a)).toBe(3);
  expect(breaker.state('tenant_1|openai-compatible|main|' + a.url)).toBe('closed');
});

test('a single model with an open breaker fails at once with circuit_open and no request', async () => {
  const breaker = new CircuitBreaker({ failures: 1, windowMs: 60_000, cooldownMs: 30_000 });
  const single = createModelChain([{ provider: 'openai-compatible', baseUrl: a.url, model: 'only' }], {
    breaker,
    scope: 't',
    maxRetries: 0,
  });
  a.script({ type: 'error', status: 503 });
  expect(llmError((await drain(single.stream(ask))).error).status).toBe(503);
  const skipped = llmError((await drain(single.stream(ask))).error);
  expect(skipped).toMatchObject({ kind: 'unavailable', code: 'circuit_open' });
  expect(skipped.retryAfterMs).toBeGreaterThan(29_000);
  expect(chats(a)).toBe(1);
});

test('circuits are per tenant: another tenant still calls the model', async () => {
  const breaker = new CircuitBreaker({ failures: 1, windowMs: 60_000, cooldownMs: 30_000 });
  const forTenant = (scope: string) =>
    createModelChain([{ provider: 'openai-compatible', baseUrl: a.url, model: 'only' }], { breaker, scope, maxRetries: 0 });
  a.script({ type: 'error', status: 503 });
  await drain(forTenant('t1').stream(ask));
  expect((await drain(forTenant('t2').stream(ask))).text).toBe('Echo: hello');
  expect(llmError((await drain(forTenant('t1').stream(ask))).error).code).toBe('circuit_open');
});

test('the request model applies to the main model only', async () => {
  a.script({ type: 'error', status: 503 });
  await drain(chain().stream({ ...ask, model: 'agent-model' }));
  expect(a.requests[0].conversation?.model).toBe('agent-model');
  expect(b.requests[0].conversation?.model).toBe('second');
});

describe('embed', () => {
  const embeddings = (fake: FakeProviderServer) => fake.requests.filter((r) => r.path.endsWith('/embeddings'));

  test('moves on from a model that fails before answering, as a stream does, and names the model that served', async () => {
    a.script({ type: 'error', status: 503 });
    const served: ServedModel[] = [];
    const res = await chain().embed({ input: ['one', 'two'], dimensions: 4 }, { onServed: (s) => served.push(s) });
    expect(res.vectors).toHaveLength(2);
    expect(res.vectors[0]).toHaveLength(4);
    expect(res.inputTokens).toBeGreaterThan(0);
    expect(served).toEqual([{ provider: 'openai-compatible', model: 'second', index: 1 }]);
    expect(embeddings(a)).toHaveLength(1);
    expect(embeddings(b)[0].body).toMatchObject({ model: 'second', input: ['one', 'two'], dimensions: 4 });
  });

  test('refuses a model whose provider has no embeddings, without moving on', async () => {
    const only = createModelChain(
      [
        { provider: 'anthropic', baseUrl: c.url, apiKey: 'ak-fallback', model: 'third' },
        { provider: 'openai-compatible', baseUrl: b.url, model: 'second' },
      ],
      { scope: 'tenant_1' },
    );
    await expect(only.embed({ input: ['x'] })).rejects.toMatchObject({ kind: 'bad_request', code: 'embeddings_not_supported' });
    expect(embeddings(b)).toHaveLength(0);
  });
});
