import { collect, createProvider, LlmError, type LlmSettings } from './index';
import { drain, echoText, fakeEmbedding, llmError, startFakeGemini, waitUntil, type FakeProviderServer } from './testing';

const KEY = 'AIzaSyFAKE-gemini-key-0123456789abcdef';

describe('gemini provider against a fake Gemini API over HTTP', () => {
  let fake: FakeProviderServer;
  const settings = (over: Partial<LlmSettings> = {}): LlmSettings => ({
    provider: 'gemini',
    apiKey: KEY,
    baseUrl: fake.url,
    model: 'gemini-2.5-flash',
    ...over,
  });
  const ask = (content: string) => ({ messages: [{ role: 'user' as const, content }] });

  beforeAll(async () => {
    fake = await startFakeGemini({ apiKey: KEY });
  });
  afterEach(() => fake.reset());
  afterAll(() => fake.close());

  it('streams text over streamGenerateContent?alt=sse with x-goog-api-key, then usage (cached included), then finish', async () => {
    const reply = 'Gemini answers in several pieces.';
    fake.script({ type: 'text', text: reply, chunks: 4, usage: { inputTokens: 40, outputTokens: 7, cachedInputTokens: 32 } });
    const { events, text, error } = await drain(createProvider(settings()).stream(ask('hi')));
    expect(error).toBeUndefined();
    expect(text).toBe(reply);
    expect(events.filter((e) => e.type === 'text')).toHaveLength(4);
    expect(events.slice(-2)).toEqual([
      { type: 'usage', inputTokens: 40, outputTokens: 7, cachedInputTokens: 32, model: 'gemini-2.5-flash' },
      { type: 'finish', reason: 'stop' },
    ]);
    const [request] = fake.requests;
    expect(request.path).toBe('/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse');
    expect(request.headers['x-goog-api-key']).toBe(KEY);
    expect(request.headers.authorization).toBeUndefined();
  });

  it('sends roles user/model, systemInstruction, functionDeclarations and functionResponse named after the call', async () => {
    const provider = createProvider(settings({ temperature: 0.3 }));
    await collect(
      provider.stream({
        model: 'models/gemini-2.5-pro',
        maxTokens: 77,
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'Weather in Oslo?' },
          { role: 'assistant', content: 'Checking.', toolCalls: [{ id: 'c1', name: 'get_weather', arguments: { city: 'Oslo' } }] },
          { role: 'tool', toolCallId: 'c1', content: '{"temp":-3}' },
          { role: 'tool', toolCallId: 'c1', content: 'plain text result' },
        ],
        tools: [{ name: 'get_weather', description: 'Weather now', parameters: { type: 'object', additionalProperties: false } }],
      }),
    );
    const [request] = fake.requests;
    expect(request.path).toBe('/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse');
    expect(request.body).toEqual({
      contents: [
        { role: 'user', parts: [{ text: 'Weather in Oslo?' }] },
        { role: 'model', parts: [{ text: 'Checking.' }, { functionCall: { name: 'get_weather', args: { city: 'Oslo' } } }] },
        {
          role: 'user',
          parts: [
            { functionResponse: { name: 'get_weather', response: { temp: -3 } } },
            { functionResponse: { name: 'get_weather', response: { result: 'plain text result' } } },
          ],
        },
      ],
      systemInstruction: { parts: [{ text: 'Be brief.' }] },
      tools: [
        {
          functionDeclarations: [
            { name: 'get_weather', description: 'Weather now', parametersJsonSchema: { type: 'object', additionalProperties: false } },
          ],
        },
      ],
      generationConfig: { temperature: 0.3, maxOutputTokens: 77 },
    });
    expect(request.conversation).toMatchObject({ system: 'Be brief.', tools: ['get_weather'] });
  });

  it('turns functionCall parts into tool calls with unique ids and finish tool_calls', async () => {
    fake.script({
      type: 'tool_calls',
      text: 'Let me see.',
      toolCalls: [
        { name: 'search', arguments: { q: 'oslo' } },
        { name: 'clock', arguments: {} },
      ],
    });
    const reply = await collect(createProvider(settings()).stream(ask('x')));
    expect(reply.text).toBe('Let me see.');
    expect(reply.toolCalls.map((c) => [c.name, c.arguments])).toEqual([
      ['search', { q: 'oslo' }],
      ['clock', {}],
    ]);
    expect(new Set(reply.toolCalls.map((c) => c.id)).size).toBe(2);
    expect(reply.finishReason).toBe('tool_calls');
  });

  it('collects a whole reply (not streamed by the caller) from the echo, with usage', async () => {
    const reply = await collect(createProvider(settings()).stream(ask('hello gemini')));
    expect(reply).toEqual({
      text: echoText('hello gemini'),
      toolCalls: [],
      usage: { inputTokens: 3, outputTokens: 5 },
      finishReason: 'stop',
    });
  });

  it('maps MAX_TOKENS to length and a safety stop to error', async () => {
    fake.script({ type: 'text', text: 'cut short', finishReason: 'length' });
    expect((await collect(createProvider(settings()).stream(ask('x')))).finishReason).toBe('length');
    const chunk = { candidates: [{ content: { parts: [{ text: 'I cannot' }], role: 'model' }, finishReason: 'SAFETY', index: 0 }] };
    fake.script({ type: 'raw', body: `data: ${JSON.stringify(chunk)}\r\n\r\n` });
    expect((await collect(createProvider(settings()).stream(ask('x')))).finishReason).toBe('error');
  });

  it('treats a stream cut after tokens as an error: socket reset, or a clean end without finishReason', async () => {
    fake.script({ type: 'cut', afterChunks: 2, text: 'one two three four five six' });
    const reset = await drain(createProvider(settings()).stream(ask('x')));
    expect(llmError(reset.error).kind).toBe('unavailable');
    expect(reset.events.some((e) => e.type === 'text')).toBe(true);
    expect(reset.events.some((e) => e.type === 'finish')).toBe(false);

    fake.script({ type: 'cut', afterChunks: 2, mode: 'end', text: 'one two three four five six' });
    const ended = await drain(createProvider(settings()).stream(ask('x')));
    expect(llmError(ended.error).kind).toBe('protocol');
    expect(ended.text).toBe('one two ');
    expect(ended.events.some((e) => e.type === 'finish')).toBe(false);
  });

  it('maps a 429 with Retry-After to rate_limited with retryAfterMs, and retries a short one', async () => {
    fake.script({ type: 'error', status: 429, retryAfter: 300 });
    const { error } = await drain(createProvider(settings()).stream(ask('x')));
    expect(llmError(error)).toMatchObject({
      kind: 'rate_limited',
      status: 429,
      retryAfterMs: 300_000,
      provider: 'gemini',
      code: 'RESOURCE_EXHAUSTED',
    });
    expect(fake.requests).toHaveLength(1);

    fake.reset();
    fake.script({ type: 'error', status: 429, retryAfter: 0 }, { type: 'text', text: 'after the limit' });
    expect((await collect(createProvider(settings()).stream(ask('x')))).text).toBe('after the limit');
    expect(fake.requests).toHaveLength(2);
  });

  it('reads the retry delay from a RetryInfo detail when there is no Retry-After header', async () => {
    const error = {
      code: 429,
      message: 'You exceeded your current quota.',
      status: 'RESOURCE_EXHAUSTED',
      details: [{ '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: '95.5s' }],
    };
    fake.script({ type: 'raw', status: 429, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ error }) });
    const drained = await drain(createProvider(settings()).stream(ask('x')));
    expect(llmError(drained.error)).toMatchObject({ kind: 'rate_limited', retryAfterMs: 95_500 });
    expect(fake.requests).toHaveLength(1);
  });

  it("maps Google's 400 API_KEY_INVALID to auth without the key, a 500 to unavailable after retries", async () => {
    const wrong = 'AIzaSyWRONG-0000000000000000000000';
    const bad = await drain(createProvider(settings({ apiKey: wrong })).stream(ask('x')));
    const e = llmError(bad.error);
    expect(e).toMatchObject({ kind: 'auth', status: 401, code: 'API_KEY_INVALID' });
    expect(JSON.stringify(e) + e.message).not.toContain(wrong);
    fake.script({ type: 'error', status: 500, times: 2, retryAfter: 0 });
    const failed = await drain(createProvider(settings({ maxRetries: 1 })).stream(ask('x')));
    expect(llmError(failed.error)).toMatchObject({ kind: 'unavailable', status: 500 });
    expect(fake.requests.filter((r) => r.path.includes('Generate'))).toHaveLength(3);
  });

  it('ends a stalled stream with kind timeout after timeoutMs of silence', async () => {
    fake.script({ type: 'hang' });
    const { error } = await drain(createProvider(settings({ timeoutMs: 300 })).stream(ask('x')));
    expect(llmError(error).kind).toBe('timeout');
  });

  it('closes the connection when the caller aborts while Gemini hangs', async () => {
    fake.script({ type: 'hang' });
    const controller = new AbortController();
    const drained = drain(createProvider(settings()).stream(ask('x'), { signal: controller.signal }));
    await waitUntil(() => fake.requests.length === 1, 5000, 'the request to arrive');
    controller.abort();
    expect(llmError((await drained).error).kind).toBe('cancelled');
    await waitUntil(() => fake.requests[0].aborted, 5000, 'the fake to see the connection close');
  });

  it('embeds through batchEmbedContents, one request for all inputs, tokens estimated', async () => {
    const provider = createProvider(settings());
    const result = await provider.embed!({ model: 'gemini-embedding-001', input: ['first text', 'second'], dimensions: 5 });
    expect(result).toEqual({
      vectors: [fakeEmbedding('first text', 5), fakeEmbedding('second', 5)],
      inputTokens: Math.ceil(16 / 4),
      estimated: true,
    });
    expect(fake.requests).toHaveLength(1);
    expect(fake.requests[0].path).toBe('/v1beta/models/gemini-embedding-001:batchEmbedContents');
    expect(fake.requests[0].body).toEqual({
      requests: [
        { model: 'models/gemini-embedding-001', content: { parts: [{ text: 'first text' }] }, outputDimensionality: 5 },
        { model: 'models/gemini-embedding-001', content: { parts: [{ text: 'second' }] }, outputDimensionality: 5 },
      ],
    });
  });

  it('refuses token arrays (it embeds texts only) before any request', async () => {
    const err = await createProvider(settings()).embed!({ model: 'gemini-embedding-001', input: [[1, 2]] }).catch((e: unknown) => e);
    expect(llmError(err)).toMatchObject({ kind: 'bad_request', code: 'token_inputs_not_supported' });
    expect(fake.requests).toHaveLength(0);
  });

  it('embeddings: a 429 is rate_limited with retryAfterMs', async () => {
    fake.script({ type: 'error', status: 429, retryAfter: 120 });
    const err = await createProvider(settings()).embed!({ model: 'gemini-embedding-001', input: ['x'] }).catch((e: unknown) => e);
    expect(llmError(err)).toMatchObject({ kind: 'rate_limited', retryAfterMs: 120_000 });
  });

  it('adds /v1beta to a root base URL, and needs a key', async () => {
    const root = fake.url.replace(/\/v1beta$/, '');
    const { error } = await drain(createProvider(settings({ baseUrl: root })).stream(ask('x')));
    expect(error).toBeUndefined();
    expect(fake.requests[0].path).toBe('/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse');
    expect(() => createProvider({ provider: 'gemini', model: 'm' })).toThrow(LlmError);
  });

  it('refuses a tool result that answers no earlier call', async () => {
    const { error } = await drain(createProvider(settings()).stream({ messages: [{ role: 'tool', toolCallId: 'nope', content: 'x' }] }));
    expect(llmError(error).kind).toBe('bad_request');
    expect(fake.requests).toHaveLength(0);
  });
});
