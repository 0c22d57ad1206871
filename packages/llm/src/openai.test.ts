import { inspect } from 'node:util';
import { collect, createProvider, LlmError, sendHttp, type LlmEvent, type LlmSettings, type LlmTransport } from './index';
import { drain, echoText, fakeEmbedding, llmError, startFakeOpenAI, waitUntil, type FakeProviderServer } from './testing';

const KEY = 'sk-test-OPENAI-9f3c2a7b1e8d4c6f';

function expectNoKey(error: unknown, key = KEY): void {
  const e = llmError(error);
  expect(e.message).not.toContain(key);
  expect(JSON.stringify(e)).not.toContain(key);
  expect(inspect(e, { depth: 5 })).not.toContain(key);
  expect(String(e.stack)).not.toContain(key);
}

describe('OpenAI provider against a fake OpenAI server over HTTP', () => {
  let fake: FakeProviderServer;
  const settings = (over: Partial<LlmSettings> = {}): LlmSettings => ({
    provider: 'openai',
    apiKey: KEY,
    baseUrl: fake.url,
    model: 'gpt-test',
    ...over,
  });
  const ask = (content: string) => ({ messages: [{ role: 'user' as const, content }] });

  beforeAll(async () => {
    fake = await startFakeOpenAI({ apiKey: KEY });
  });
  afterEach(() => fake.reset());
  afterAll(() => fake.close());

  it('streams text: the deltas join to the scripted reply, then usage, then finish', async () => {
    const reply = 'The quick brown fox jumps over the lazy dog.';
    fake.script({ type: 'text', text: reply, chunks: 5, usage: { inputTokens: 11, outputTokens: 9 } });
    const { events, text, error } = await drain(createProvider(settings()).stream(ask('Tell me about foxes')));
    expect(error).toBeUndefined();
    expect(text).toBe(reply);
    expect(events.filter((e) => e.type === 'text')).toHaveLength(5);
    expect(events.slice(-2)).toEqual([
      { type: 'usage', inputTokens: 11, outputTokens: 9, model: 'gpt-test' },
      { type: 'finish', reason: 'stop' },
    ]);
  });

  it('tells the usage as soon as its chunk arrives, before the end of the stream', async () => {
    fake.script({ type: 'text', text: 'all of it', usage: { inputTokens: 4, outputTokens: 3 }, holdEndMs: 3_000 });
    const abort = new AbortController();
    const seen: LlmEvent[] = [];
    const stream = createProvider(settings()).stream(ask('answer, then wait'), { signal: abort.signal });
    const error = await (async () => {
      for await (const e of stream) {
        seen.push(e);
        // The provider holds [DONE]: a caller that dies now has been told what the call costs.
        if (e.type === 'usage') abort.abort();
      }
    })().catch((err: unknown) => err);
    expect(seen.filter((e) => e.type !== 'text')).toEqual([{ type: 'usage', inputTokens: 4, outputTokens: 3, model: 'gpt-test' }]);
    expect(llmError(error).kind).toBe('cancelled');
  });

  it('answers with the deterministic echo when nothing is scripted', async () => {
    const { text, events } = await drain(createProvider(settings()).stream(ask('hello there')));
    expect(text).toBe(echoText('hello there'));
    expect(events.filter((e) => e.type === 'text').length).toBeGreaterThan(1);
    expect(events.find((e) => e.type === 'usage')).toEqual({ type: 'usage', inputTokens: 3, outputTokens: 5, model: 'gpt-test' });
  });

  it('sends the Chat Completions request shape, with the key as a bearer token', async () => {
    const provider = createProvider(settings({ temperature: 0.2, maxTokens: 50 }));
    await drain(
      provider.stream({
        model: 'gpt-override',
        messages: [
          { role: 'system', content: 'You are terse.' },
          { role: 'user', content: 'Weather in Paris?' },
          { role: 'assistant', content: '', toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: { city: 'Paris' } }] },
          { role: 'tool', content: '{"temp":21}', toolCallId: 'call_1' },
        ],
        tools: [
          { name: 'get_weather', description: 'Current weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
        ],
        maxTokens: 99,
      }),
    );
    expect(fake.requests).toHaveLength(1);
    const [request] = fake.requests;
    expect(request.method).toBe('POST');
    expect(request.path).toBe('/v1/chat/completions');
    expect(request.headers.authorization).toBe(`Bearer ${KEY}`);
    expect(request.body).toEqual({
      model: 'gpt-override',
      stream: true,
      stream_options: { include_usage: true },
      temperature: 0.2,
      max_completion_tokens: 99,
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'Weather in Paris?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
        },
        { role: 'tool', tool_call_id: 'call_1', content: '{"temp":21}' },
      ],
      tools: [
        {
          type: 'function',
          function: {
            name: 'get_weather',
            description: 'Current weather',
            parameters: { type: 'object', properties: { city: { type: 'string' } } },
          },
        },
      ],
    });
  });

  it('assembles tool calls from argument fragments spread over several chunks', async () => {
    const args1 = { city: 'São Paulo', units: 'metric', days: [1, 2, 3], nested: { deep: { ok: true } } };
    fake.script({
      type: 'tool_calls',
      text: 'Let me look that up.',
      argumentChunks: 7,
      toolCalls: [
        { id: 'call_a', name: 'get_weather', arguments: args1 },
        { id: 'call_b', name: 'get_time', arguments: { zone: 'America/Sao_Paulo' } },
      ],
    });
    const { events, text, error } = await drain(createProvider(settings()).stream(ask('weather and time?')));
    expect(error).toBeUndefined();
    expect(text).toBe('Let me look that up.');
    expect(events.filter((e) => e.type === 'tool_call')).toEqual([
      { type: 'tool_call', id: 'call_a', name: 'get_weather', arguments: args1 },
      { type: 'tool_call', id: 'call_b', name: 'get_time', arguments: { zone: 'America/Sao_Paulo' } },
    ]);
    expect(events[events.length - 1]).toEqual({ type: 'finish', reason: 'tool_calls' });
    expect(events.some((e) => e.type === 'usage')).toBe(true);
  });

  it('reports tool-call arguments that are not valid JSON as a protocol error', async () => {
    fake.script({ type: 'tool_calls', toolCalls: [{ name: 'get_weather', arguments: '{"city": "Par' }] });
    const { events, error } = await drain(createProvider(settings()).stream(ask('x')));
    expect(llmError(error).kind).toBe('protocol');
    expect(events.some((e) => e.type === 'finish' || e.type === 'tool_call')).toBe(false);
  });

  it('retries a 429 (retry-after: 0) and then succeeds', async () => {
    fake.script({ type: 'error', status: 429 }, { type: 'text', text: 'after the limit' });
    const { text, error } = await drain(createProvider(settings()).stream(ask('x')));
    expect(error).toBeUndefined();
    expect(text).toBe('after the limit');
    expect(fake.requests).toHaveLength(2);
    expect(fake.requests.every((r) => r.headers.authorization === `Bearer ${KEY}`)).toBe(true);
  });

  it('retries a 500 with backoff and then succeeds', async () => {
    fake.script({ type: 'error', status: 500 }, { type: 'text', text: 'recovered' });
    const { text, error } = await drain(createProvider(settings()).stream(ask('x')));
    expect(error).toBeUndefined();
    expect(text).toBe('recovered');
    expect(fake.requests).toHaveLength(2);
  });

  it('gives up after maxRetries with kind unavailable', async () => {
    fake.script({ type: 'error', status: 503, times: 3, retryAfter: 0 });
    const { error } = await drain(createProvider(settings({ maxRetries: 1 })).stream(ask('x')));
    const e = llmError(error);
    expect(e.kind).toBe('unavailable');
    expect(e.status).toBe(503);
    expect(fake.requests).toHaveLength(2);
  });

  it('does not sleep through a retry-after longer than the cap: rate_limited with retryAfterMs', async () => {
    fake.script({ type: 'error', status: 429, retryAfter: 3600 });
    const { error } = await drain(createProvider(settings()).stream(ask('x')));
    const e = llmError(error);
    expect(e.kind).toBe('rate_limited');
    expect(e.retryAfterMs).toBe(3_600_000);
    expect(fake.requests).toHaveLength(1);
  });

  it('maps 401 to kind auth, does not retry, and never shows the key', async () => {
    const wrongKey = 'sk-test-WRONG-0123456789abcdef';
    const { error } = await drain(createProvider(settings({ apiKey: wrongKey })).stream(ask('x')));
    const e = llmError(error);
    expect(e.kind).toBe('auth');
    expect(e.status).toBe(401);
    expect(fake.requests).toHaveLength(1);
    expect(fake.requests[0].headers.authorization).toBe(`Bearer ${wrongKey}`);
    expectNoKey(e, wrongKey);
    // The fake, like OpenAI, quoted a masked form of the key: that is not passed on either.
    expect(e.message).not.toContain(wrongKey.slice(0, 5));
  });

  it('redacts the key when a provider error message quotes it', async () => {
    fake.script({ type: 'error', status: 400, message: `Header value ${KEY} is malformed (Bearer ${KEY})` });
    const { error } = await drain(createProvider(settings()).stream(ask('x')));
    const e = llmError(error);
    expect(e.kind).toBe('bad_request');
    expect(e.message).toContain('[redacted]');
    expectNoKey(e);
  });

  it('treats a stream cut in the middle (socket destroyed) as an error, not a success', async () => {
    fake.script({ type: 'cut', afterChunks: 3, text: 'one two three four five six seven' });
    const { events, error } = await drain(createProvider(settings()).stream(ask('x')));
    const e = llmError(error);
    expect(['unavailable', 'protocol']).toContain(e.kind);
    expect(events.filter((ev) => ev.type === 'text').length).toBeGreaterThan(0);
    expect(events.some((ev) => ev.type === 'finish')).toBe(false);
    expectNoKey(e);
  });

  it('treats a response that ends cleanly before data: [DONE] as a protocol error', async () => {
    fake.script({ type: 'cut', afterChunks: 4, mode: 'end' });
    const { events, error } = await drain(createProvider(settings()).stream(ask('x')));
    expect(llmError(error).kind).toBe('protocol');
    expect(events.some((ev) => ev.type === 'finish')).toBe(false);
  });

  it('still requires [DONE] after finish_reason', async () => {
    const chunk = (delta: object, finish: string | null) =>
      `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    fake.script({ type: 'raw', body: chunk({ role: 'assistant', content: 'Hi' }, null) + chunk({}, 'stop') });
    const { error } = await drain(createProvider(settings()).stream(ask('x')));
    expect(llmError(error).kind).toBe('protocol');
  });

  it('turns an error object sent inside the stream into an LlmError', async () => {
    fake.script({
      type: 'raw',
      body: `data: ${JSON.stringify({ error: { message: 'The server is overloaded', type: 'server_error' } })}\n\n`,
    });
    const { error } = await drain(createProvider(settings()).stream(ask('x')));
    const e = llmError(error);
    expect(e.kind).toBe('unavailable');
    expect(e.message).toContain('overloaded');
  });

  it('ends promptly with kind cancelled when aborted while the server hangs', async () => {
    fake.script({ type: 'hang' });
    const controller = new AbortController();
    const started = Date.now();
    setTimeout(() => controller.abort(), 100);
    const { error } = await drain(createProvider(settings()).stream(ask('x'), { signal: controller.signal }));
    expect(llmError(error).kind).toBe('cancelled');
    expect(Date.now() - started).toBeLessThan(5000);
    await waitUntil(() => fake.requests[0]?.aborted === true, 5000, 'the fake to see the connection close');
  });

  it('ends with kind cancelled when aborted before the response headers', async () => {
    fake.script({ type: 'hang', stage: 'headers' });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 100);
    const { error } = await drain(createProvider(settings()).stream(ask('x'), { signal: controller.signal }));
    expect(llmError(error).kind).toBe('cancelled');
  });

  it('ends with kind cancelled when aborted in the middle of a reply', async () => {
    fake.script({ type: 'text', text: 'a b c d e f g h i j k l m n o p q r s t', delayMs: 50 });
    const controller = new AbortController();
    const { events, error } = await drain(createProvider(settings()).stream(ask('x'), { signal: controller.signal }), (event) => {
      if (event.type === 'text') controller.abort();
    });
    expect(llmError(error).kind).toBe('cancelled');
    expect(events.filter((e) => e.type === 'text').length).toBeGreaterThanOrEqual(1);
    expect(events.some((e) => e.type === 'finish')).toBe(false);
  });

  it('does not send anything when the signal is already aborted', async () => {
    const controller = new AbortController();
    controller.abort();
    const { error } = await drain(createProvider(settings()).stream(ask('x'), { signal: controller.signal }));
    expect(llmError(error).kind).toBe('cancelled');
    expect(fake.requests).toHaveLength(0);
  });

  it('ends a stalled stream with kind timeout after timeoutMs of silence', async () => {
    fake.script({ type: 'hang' });
    const { error } = await drain(createProvider(settings({ timeoutMs: 300 })).stream(ask('x')));
    expect(llmError(error).kind).toBe('timeout');
  });

  it('closes the connection when the consumer stops reading early', async () => {
    fake.script({ type: 'text', text: 'one two three four five six seven eight nine ten', delayMs: 100 });
    for await (const event of createProvider(settings()).stream(ask('x'))) {
      if (event.type === 'text') break;
    }
    await waitUntil(() => fake.requests[0]?.aborted === true, 5000, 'the fake to see the connection close');
  });

  it('reads a complete reply to its end after [DONE], without destroying the body (its connection is reused)', async () => {
    const bodies: Array<Awaited<ReturnType<LlmTransport>>['body']> = [];
    const keeping: LlmTransport = async (url, init) => {
      const reply = await sendHttp(url, init);
      bodies.push(reply.body);
      return reply;
    };
    for (let i = 0; i < 3; i++) {
      const { text, error } = await drain(createProvider(settings({ transport: keeping })).stream(ask(`call ${i}`)));
      expect(error).toBeUndefined();
      expect(text).not.toBe('');
    }
    expect(bodies).toHaveLength(3);
    await waitUntil(() => bodies.every((b) => b.readableEnded), 5000, 'every body to be read to its end');
    // Destroyed before its end, a body fails with an abort error and undici drops its request.
    expect(bodies.map((b) => b.errored)).toEqual([null, null, null]);
    expect(fake.requests.map((r) => r.aborted)).toEqual([false, false, false]);
  });

  it('sends every request through the injected transport (the egress guard), retries included', async () => {
    let calls = 0;
    const counting: LlmTransport = (url, init) => {
      calls++;
      return sendHttp(url, init);
    };
    fake.script({ type: 'error', status: 429 });
    const { text } = await drain(createProvider(settings({ transport: counting })).stream(ask('counted')));
    expect(text).toBe(echoText('counted'));
    expect(calls).toBe(2);
    expect(fake.requests).toHaveLength(2);
  });

  it('throws an LlmError raised by the injected transport as is, without retrying', async () => {
    const refused = new LlmError('bad_request', 'egress refused: 10.0.0.1 is a private address');
    let calls = 0;
    const guard: LlmTransport = async () => {
      calls++;
      throw refused;
    };
    const { error } = await drain(createProvider(settings({ transport: guard })).stream(ask('x')));
    expect(error).toBe(refused);
    expect(calls).toBe(1);
    expect(fake.requests).toHaveLength(0);
  });

  it('reports an unreachable server as kind unavailable without the key', async () => {
    const gone = await startFakeOpenAI();
    const url = gone.url;
    await gone.close();
    const { error } = await drain(createProvider(settings({ baseUrl: url, maxRetries: 0 })).stream(ask('x')));
    const e = llmError(error);
    expect(e.kind).toBe('unavailable');
    expectNoKey(e);
  });

  it('serves concurrent streams from one provider independently', async () => {
    const provider = createProvider(settings());
    const results = await Promise.all(['first', 'second', 'third'].map((q) => drain(provider.stream(ask(q)))));
    expect(results.map((r) => r.text)).toEqual([echoText('first'), echoText('second'), echoText('third')]);
  });

  it('reports the cached part of the prompt (prompt_tokens_details.cached_tokens)', async () => {
    fake.script({ type: 'text', text: 'cached', usage: { inputTokens: 2048, outputTokens: 2, cachedInputTokens: 1024 } });
    const reply = await collect(createProvider(settings()).stream(ask('x')));
    expect(reply.usage).toEqual({ inputTokens: 2048, outputTokens: 2, cachedInputTokens: 1024 });
  });

  it('embeds a batch of inputs with one request, as floats, with the usage', async () => {
    const result = await createProvider(settings()).embed!({ model: 'text-embedding-3-small', input: ['one', 'two three'], dimensions: 3 });
    expect(result).toEqual({ vectors: [fakeEmbedding('one', 3), fakeEmbedding('two three', 3)], inputTokens: 1 + 3 });
    expect(fake.requests).toHaveLength(1);
    expect(fake.requests[0].path).toBe('/v1/embeddings');
    expect(fake.requests[0].body).toEqual({
      model: 'text-embedding-3-small',
      input: ['one', 'two three'],
      dimensions: 3,
      encoding_format: 'float',
    });
  });

  it('embeddings: a 429 with a long Retry-After is rate_limited, a hang is cancelled by the signal', async () => {
    fake.script({ type: 'error', status: 429, retryAfter: 90 });
    const limited = await createProvider(settings()).embed!({ model: 'e', input: ['x'] }).catch((err: unknown) => err);
    expect(llmError(limited)).toMatchObject({ kind: 'rate_limited', retryAfterMs: 90_000 });
    fake.reset();
    fake.script({ type: 'hang' });
    const controller = new AbortController();
    const pending = createProvider(settings()).embed!({ model: 'e', input: ['x'] }, { signal: controller.signal }).catch(
      (err: unknown) => err,
    );
    await waitUntil(() => fake.requests.length === 1, 5000, 'the request to arrive');
    controller.abort();
    expect(llmError(await pending).kind).toBe('cancelled');
    await waitUntil(() => fake.requests[0].aborted, 5000, 'the fake to see the connection close');
  });

  it('maps finish_reason length', async () => {
    fake.script({ type: 'text', text: 'cut short', finishReason: 'length' });
    const { events } = await drain(createProvider(settings()).stream(ask('x')));
    expect(events[events.length - 1]).toEqual<LlmEvent>({ type: 'finish', reason: 'length' });
  });
});
