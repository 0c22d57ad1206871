/**
 * Model fallbacks and circuit breakers (CONTRACT.md 9, issue 21 part 2), through the gateway on the fake providers:
 * the main model answers 503, 429 with Retry-After, hangs, or cuts its stream before or after the first token. The
 * client always gets a complete answer from a fallback, or an explicit error; a model whose breaker is open is not
 * asked at all (requests counted at the fake), and is tried again after the cooldown. The model that served is on
 * the reply and the step, and billing records the call under it.
 */
import {
  echoText,
  startFakeAnthropic,
  startFakeOpenAI,
  type FakeBehaviour,
  type FakeProviderServer,
  type FakeRequest,
} from '@svc/llm/testing';
import { client, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { joinedDeltas, readSse } from '../helpers/sse';
import { startStack, type Stack } from '../helpers/stack';

let stack: Stack;
let api: Client;
let openai: FakeProviderServer;
let anthropic: FakeProviderServer;
const KEY = 'sk-main-' + 'm'.repeat(32);
const ANTHROPIC_KEY = 'sk-ant-fallback-' + 'a'.repeat(32);
const LLM = '/api/v1/tenant/settings/llm';
const S = '/api/v1/chat/sessions';

/** What the fake does for each model name; models not listed echo. Each test uses model names of its own. */
const plan = new Map<string, () => FakeBehaviour>();
let modelSeq = 0;
const modelName = (what: string) => `${what}-${++modelSeq}`;
/** Chat requests that reached the fakes for a model, with when they arrived. */
const arrivals = new Map<string, number[]>();
const requestsFor = (model: string) => arrivals.get(model)?.length ?? 0;

function route(request: FakeRequest): FakeBehaviour {
  const model = request.conversation?.model ?? '';
  arrivals.set(model, [...(arrivals.get(model) ?? []), Date.now()]);
  const behaviour = plan.get(model);
  if (behaviour) return behaviour();
  const lastUser = [...(request.conversation?.messages ?? [])].reverse().find((m) => m.role === 'user');
  return { type: 'text', text: echoText(lastUser?.text ?? ''), chunks: 3 };
}

beforeAll(async () => {
  openai = await startFakeOpenAI({ apiKey: KEY });
  anthropic = await startFakeAnthropic({ apiKey: ANTHROPIC_KEY });
  openai.setDefault(route);
  anthropic.setDefault(route);
  stack = await startStack({
    env: {
      EGRESS_ALLOW_PRIVATE: 'true', // the fakes are on loopback
      CHAT_LLM_TIMEOUT_MS: '1000',
      AGENTS_LLM_TIMEOUT_MS: '1000',
      CHAT_LLM_RETRIES: '1',
      AGENTS_LLM_RETRIES: '1',
      AGENTS_STEP_RETRIES: '0',
      AGENTS_POLL_MS: '50',
      AGENTS_RETRY_BASE_MS: '10',
      CHAT_DRAIN_MS: '0',
      LLM_BREAKER_FAILURES: '2',
      LLM_BREAKER_COOLDOWN_S: '1',
    },
  });
  api = client(stack.url);
});
afterAll(async () => {
  await stack.stop();
  await openai.close();
  await anthropic.close();
});

interface Tenant {
  owner: Account;
  token: string;
}

/** A tenant whose main model and fallbacks are models on the fakes. */
async function tenant(main: string, fallbacks: Array<Record<string, unknown>>): Promise<Tenant> {
  const owner = await signUp(api, 'Fallbacks');
  const res = await api.patch(
    LLM,
    { provider: 'openai', baseUrl: openai.url, apiKey: KEY, model: main, fallbacks },
    { token: owner.accessToken },
  );
  expect(res.status).toBe(200);
  return { owner, token: owner.accessToken };
}

const sameServer = (model: string) => ({ provider: 'openai', model, baseUrl: openai.url });

/** Posts a message and reads the reply's stream to its end; returns the events and the stored reply. */
async function ask(t: Tenant, content = 'Where is the fallback?') {
  const session = (await api.post(S, {}, { token: t.token })).body.data.id;
  const posted = await api.post(`${S}/${session}/messages`, { content }, { token: t.token });
  expect(posted.status).toBe(202);
  const streamed = await readSse(`${stack.url}${S}/${session}/stream`, { token: t.token });
  expect(streamed.status).toBe(200);
  let stored: any;
  await eventually(async () => {
    const list = (await api.get(`${S}/${session}/messages`, { token: t.token })).body.data;
    stored = list.find((m: { id: string }) => m.id === posted.body.data.responseMessageId);
    return stored?.status === 'completed' || stored?.status === 'failed';
  }, 10_000);
  return { events: streamed.events, text: joinedDeltas(streamed.events), last: streamed.events[streamed.events.length - 1], stored };
}

describe('settings', () => {
  it('keeps an ordered list of at most 5 fallbacks; their keys are write-only and kept when the list is written back', async () => {
    const owner = await signUp(api, 'Settings');
    const t = { token: owner.accessToken };
    const set = await api.patch(
      LLM,
      {
        provider: 'openai',
        model: 'gpt-main',
        apiKey: KEY,
        fallbacks: [
          { provider: 'anthropic', model: 'claude-b', apiKey: ANTHROPIC_KEY },
          { provider: 'openai-compatible', model: 'llama', baseUrl: 'http://127.0.0.1:11434/v1/' },
        ],
      },
      t,
    );
    expect(set.status).toBe(200);
    expect(set.body.data.fallbacks).toEqual([
      { provider: 'anthropic', model: 'claude-b', baseUrl: null, apiKeySet: true },
      { provider: 'openai-compatible', model: 'llama', baseUrl: 'http://127.0.0.1:11434/v1', apiKeySet: false },
    ]);
    expect(set.text).not.toContain(ANTHROPIC_KEY);
    // apiKeySet is not a writable field (no mass assignment).
    expectError(await api.patch(LLM, { fallbacks: set.body.data.fallbacks }, t), 400, 'VALIDATION_ERROR');
    // The list reordered and written back without keys: the anthropic entry keeps its key.
    const [first, second] = set.body.data.fallbacks;
    const reordered = await api.patch(
      LLM,
      {
        fallbacks: [
          { provider: second.provider, model: second.model, baseUrl: second.baseUrl },
          { provider: first.provider, model: first.model },
        ],
      },
      t,
    );
    expect(reordered.body.data.fallbacks.map((f: any) => [f.model, f.apiKeySet])).toEqual([
      ['llama', false],
      ['claude-b', true],
    ]);
    // A PATCH without fallbacks leaves them; null removes them.
    expect((await api.patch(LLM, { temperature: 0.5 }, t)).body.data.fallbacks).toHaveLength(2);
    expect((await api.get(LLM, t)).body.data.fallbacks).toHaveLength(2);
    expect((await api.patch(LLM, { fallbacks: null }, t)).body.data.fallbacks).toEqual([]);
  });

  it('refuses more than 5 entries, unknown providers and an openai-compatible entry without a base URL, in the envelope', async () => {
    const owner = await signUp(api, 'Settings');
    const t = { token: owner.accessToken };
    await api.patch(LLM, { provider: 'openai', model: 'gpt-main', apiKey: KEY }, t);
    const six = Array.from({ length: 6 }, (_, i) => ({ provider: 'openai', model: `m${i}` }));
    expect(expectError(await api.patch(LLM, { fallbacks: six }, t), 400, 'VALIDATION_ERROR').details.fields[0].field).toMatch(/fallbacks/);
    expectError(await api.patch(LLM, { fallbacks: [{ provider: 'mistral', model: 'x' }] }, t), 400, 'VALIDATION_ERROR');
    const noBase = expectError(
      await api.patch(LLM, { fallbacks: [{ provider: 'openai-compatible', model: 'x' }] }, t),
      400,
      'VALIDATION_ERROR',
    );
    expect(noBase.details.fields).toEqual([{ field: 'fallbacks[0].baseUrl', message: 'is required for openai-compatible providers' }]);
    const badUrl = expectError(
      await api.patch(LLM, { fallbacks: [{ provider: 'openai', model: 'x', baseUrl: 'file:///etc/passwd' }] }, t),
      400,
      'VALIDATION_ERROR',
    );
    expect(badUrl.details.fields).toEqual([{ field: 'fallbacks[0].baseUrl', message: expect.any(String) }]);
    expect((await api.get(LLM, t)).body.data.fallbacks).toEqual([]);
  });
});

describe('a failure before the first token moves on to the next model', () => {
  test.each([
    ['503', (): FakeBehaviour => ({ type: 'error', status: 503 })],
    ['429 with Retry-After: 30', (): FakeBehaviour => ({ type: 'error', status: 429, retryAfter: 30 })],
    ['a hang (no headers)', (): FakeBehaviour => ({ type: 'hang', stage: 'headers' })],
    ['a cut before the first token', (): FakeBehaviour => ({ type: 'cut', afterChunks: 0 })],
  ])('%s: the fallback serves the whole reply, recorded under its own model, billed under the name asked', async (_name, behaviour) => {
    const main = modelName('main');
    const backup = modelName('backup');
    plan.set(main, behaviour);
    const t = await tenant(main, [sameServer(backup)]);
    const started = Date.now();
    const { text, last, stored } = await ask(t, 'What survives?');
    expect(Date.now() - started).toBeLessThan(8_000); // the Retry-After of 30 s was not slept through
    expect(text).toBe(echoText('What survives?'));
    expect(last.event).toBe('message.completed');
    expect(stored).toMatchObject({ status: 'completed', content: echoText('What survives?'), model: backup, error: null });
    expect(requestsFor(main)).toBe(1); // not retried: the next model is its retry
    expect(requestsFor(backup)).toBe(1);
    // The fallback had no key of its own: the main key went with it (same provider, same base URL).
    const backupRequest = openai.requests.find((r) => r.conversation?.model === backup)!;
    expect(backupRequest.headers.authorization).toBe(`Bearer ${KEY}`);
    // Billed once, under the model as the caller asked for it (CONTRACT.md 12; older billing prefixes the provider).
    const from = new Date(Date.now() - 3_600_000).toISOString();
    const to = new Date(Date.now() + 3_600_000).toISOString();
    let rows: any[] = [];
    await eventually(async () => {
      rows = (await api.get(`/api/v1/billing/usage?from=${from}&to=${to}&groupBy=model`, { token: t.token })).body.data;
      return rows.length > 0;
    }, 10_000);
    expect(rows.map((r) => [r.model.slice(r.model.lastIndexOf('/') + 1), r.calls])).toEqual([[main, 1]]);
  });

  it('two failing models: a third on another provider, with its own key, answers', async () => {
    const main = modelName('main');
    const second = modelName('second');
    const third = modelName('claude');
    plan.set(main, () => ({ type: 'error', status: 500 }));
    plan.set(second, () => ({ type: 'error', status: 502 }));
    const t = await tenant(main, [
      sameServer(second),
      { provider: 'anthropic', model: third, baseUrl: anthropic.url, apiKey: ANTHROPIC_KEY },
    ]);
    const { text, stored } = await ask(t, 'Third time');
    expect(text).toBe(echoText('Third time'));
    expect(stored.model).toBe(third);
    expect(anthropic.requests.find((r) => r.conversation?.model === third)?.headers['x-api-key']).toBe(ANTHROPIC_KEY);
  });

  it('an agent run: the step records the fallback that served it', async () => {
    const main = modelName('main');
    const backup = modelName('backup');
    plan.set(main, () => ({ type: 'error', status: 503 }));
    const t = await tenant(main, [sameServer(backup)]);
    const project = (await api.post('/api/v1/projects', { name: 'Fallback site' }, { token: t.token })).body.data.id;
    const agent = (
      await api.post('/api/v1/agents', { name: 'a', systemPrompt: 'Answer.', config: { autonomyLevel: 'manual' } }, { token: t.token })
    ).body.data.id;
    const run = (await api.post(`/api/v1/agents/${agent}/execute`, { goal: 'Summarise', projectId: project }, { token: t.token })).body
      .data;
    let done: any;
    await eventually(async () => {
      done = (await api.get(`/api/v1/agents/${agent}/runs/${run.id}`, { token: t.token })).body.data;
      return ['completed', 'failed'].includes(done.status);
    }, 10_000);
    expect(done).toMatchObject({ status: 'completed', output: echoText('Summarise') });
    expect(done.steps[0]).toMatchObject({ type: 'model', model: backup });
    expect(requestsFor(main)).toBe(1);
  });
});

describe('never a silent end', () => {
  it('a stream cut after its first token ends with an error event, and no fallback is asked', async () => {
    const main = modelName('main');
    const backup = modelName('backup');
    plan.set(main, () => ({ type: 'cut', afterChunks: 2, text: 'one two three four five six', chunks: 6 }));
    const t = await tenant(main, [sameServer(backup)]);
    const { events, text, last, stored } = await ask(t);
    expect(events.filter((e) => e.event === 'message.delta').length).toBeGreaterThan(0);
    expect(text.length).toBeGreaterThan(0);
    expect(last.event).toBe('error');
    expect(last.data).toEqual({ code: 'LLM_UNAVAILABLE', message: expect.any(String) });
    expect(stored).toMatchObject({ status: 'failed', model: main, content: text });
    expect(requestsFor(backup)).toBe(0);
  });

  it('every model failing before its first token: an explicit error event', async () => {
    const main = modelName('main');
    const backup = modelName('backup');
    plan.set(main, () => ({ type: 'error', status: 503 }));
    plan.set(backup, () => ({ type: 'cut', afterChunks: 0 }));
    const t = await tenant(main, [sameServer(backup)]);
    const { events, last, stored } = await ask(t);
    expect(events.filter((e) => e.event === 'message.delta')).toEqual([]);
    expect(last).toMatchObject({ event: 'error', data: { code: 'LLM_UNAVAILABLE' } });
    expect(stored.status).toBe('failed');
    // The last model that could be tried retried once (CHAT_LLM_RETRIES=1).
    expect([requestsFor(main), requestsFor(backup)]).toEqual([1, 2]);
  });
});

describe('circuit breaker', () => {
  it('once open, the failing model gets no request at all; after the cooldown one trial goes to it', async () => {
    const main = modelName('main');
    const backup = modelName('backup');
    plan.set(main, () => ({ type: 'error', status: 503 }));
    const t = await tenant(main, [sameServer(backup)]);
    // LLM_BREAKER_FAILURES=2: two failures open the main model's circuit.
    for (let i = 0; i < 2; i++) expect((await ask(t)).stored.model).toBe(backup);
    expect(requestsFor(main)).toBe(2);
    const openedAt = Date.now();
    for (let i = 0; i < 2; i++) expect((await ask(t)).stored.model).toBe(backup);
    expect(requestsFor(main)).toBe(2); // skipped: not one attempt
    expect(requestsFor(backup)).toBe(4);
    // Another tenant's circuit for the same model is its own.
    const other = await tenant(main, [sameServer(backup)]);
    await ask(other);
    expect(requestsFor(main)).toBe(3);
    // LLM_BREAKER_COOLDOWN_S=1: then half-open, one trial; the model answers again and serves.
    plan.delete(main);
    await new Promise((r) => setTimeout(r, Math.max(0, 1_100 - (Date.now() - openedAt))));
    const trial = await ask(t, 'Back again?');
    expect(trial.stored).toMatchObject({ status: 'completed', model: main, content: echoText('Back again?') });
    expect(requestsFor(main)).toBe(4);
  });

  it('a model with no fallback is skipped too: a fast explicit error, no attempt, until the cooldown ends', async () => {
    const solo = modelName('solo');
    plan.set(solo, () => ({ type: 'error', status: 503 }));
    const t = await tenant(solo, []);
    // One reply: its attempt and its one retry fail, which opens the circuit.
    const first = await ask(t);
    expect(first.last).toMatchObject({ event: 'error', data: { code: 'LLM_UNAVAILABLE' } });
    expect(requestsFor(solo)).toBe(2);
    const skipped = await ask(t);
    expect(skipped.last).toMatchObject({ event: 'error', data: { code: 'LLM_UNAVAILABLE' } });
    expect(skipped.last.data.message).toMatch(/circuit open/);
    expect(requestsFor(solo)).toBe(2);
    plan.delete(solo);
    await new Promise((r) => setTimeout(r, 1_100));
    expect((await ask(t, 'Recovered?')).stored).toMatchObject({ status: 'completed', content: echoText('Recovered?') });
    expect(requestsFor(solo)).toBe(3);
  });

  it('the last model honours Retry-After before its retry', async () => {
    const solo = modelName('solo');
    let first = true;
    plan.set(solo, () => {
      if (!first) return { type: 'text', text: 'after the wait' };
      first = false;
      return { type: 'error', status: 429, retryAfter: 1 };
    });
    const t = await tenant(solo, []);
    const { stored } = await ask(t);
    expect(stored).toMatchObject({ status: 'completed', content: 'after the wait' });
    const [a, b] = arrivals.get(solo)!;
    expect(b - a).toBeGreaterThanOrEqual(950);
  });
});
