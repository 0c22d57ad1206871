import { inspect } from 'node:util';
import { createProvider, sendHttp, type LlmSettings, type LlmTransport } from './index';
import { drain, echoText, llmError, startFakeAnthropic, waitUntil, type FakeProviderServer } from './testing';

const KEY = 'sk-ant-test-7d1e5b3a9c0f2e4d6b8a';

function expectNoKey(error: unknown, key = KEY): void {
  const e = llmError(error);
  expect(e.message).not.toContain(key);
  expect(JSON.stringify(e)).not.toContain(key);
  expect(inspect(e, { depth: 5 })).not.toContain(key);
  expect(String(e.stack)).not.toContain(key);
}

function sse(event: string, data: object): string {
  return `event: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`;
}

describe('Anthropic provider against a fake Anthropic server over HTTP', () => {
  let fake: FakeProviderServer;
  const settings = (over: Partial<LlmSettings> = {}): LlmSettings => ({
    provider: 'anthropic',
    apiKey: KEY,
    baseUrl: fake.url,
    model: 'claude-test',
    ...over,
  });
  const ask = (content: string) => ({ messages: [{ role: 'user' as const, content }] });

  beforeAll(async () => {
    fake = await startFakeAnthropic({ apiKey: KEY });
  });
  afterEach(() => fake.reset());
  afterAll(() => fake.close());

  it('streams text: the deltas join to the scripted reply; usage from message_start and message_delta', async () => {
    const reply = 'Pack my box with five dozen liquor jugs.';
    fake.script({ type: 'text', text: reply, chunks: 4, usage: { inputTokens: 21, outputTokens: 8 } });
    const { events, text, error } = await drain(createProvider(settings()).stream(ask('pangram please')));
    expect(error).toBeUndefined();
    expect(text).toBe(reply);
    expect(events.filter((e) => e.type === 'text')).toHaveLength(4);
    expect(events.slice(-2)).toEqual([
      { type: 'usage', inputTokens: 21, outputTokens: 8, model: 'claude-test' },
      { type: 'finish', reason: 'stop' },
    ]);
  });

  it('answers with the deterministic echo when nothing is scripted', async () => {
    const { text } = await drain(createProvider(settings()).stream(ask('bonjour')));
    expect(text).toBe(echoText('bonjour'));
  });

  it('sends x-api-key and anthropic-version, the system prompt in `system`, tool turns as blocks', async () => {
    await drain(
      createProvider(settings({ temperature: 0.5 })).stream({
        messages: [
          { role: 'system', content: 'You are terse.' },
          { role: 'system', content: 'Answer in French.' },
          { role: 'user', content: 'Weather and time in Paris?' },
          {
            role: 'assistant',
            content: 'Checking.',
            toolCalls: [
              { id: 'toolu_1', name: 'get_weather', arguments: { city: 'Paris' } },
              { id: 'toolu_2', name: 'get_time', arguments: { zone: 'Europe/Paris' } },
            ],
          },
          { role: 'tool', content: '{"temp":21}', toolCallId: 'toolu_1' },
          { role: 'tool', content: '12:00', toolCallId: 'toolu_2' },
        ],
        tools: [
          { name: 'get_weather', description: 'Current weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
        ],
      }),
    );
    expect(fake.requests).toHaveLength(1);
    const [request] = fake.requests;
    expect(request.path).toBe('/v1/messages');
    expect(request.headers['x-api-key']).toBe(KEY);
    expect(request.headers['anthropic-version']).toBe('2023-06-01');
    expect(request.headers.authorization).toBeUndefined();
    expect(request.body).toEqual({
      model: 'claude-test',
      max_tokens: 4096,
      stream: true,
      temperature: 0.5,
      system: 'You are terse.\n\nAnswer in French.',
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'Weather and time in Paris?' }] },
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'Checking.' },
            { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } },
            { type: 'tool_use', id: 'toolu_2', name: 'get_time', input: { zone: 'Europe/Paris' } },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'toolu_1', content: '{"temp":21}' },
            { type: 'tool_result', tool_use_id: 'toolu_2', content: '12:00' },
          ],
        },
      ],
      tools: [
        { name: 'get_weather', description: 'Current weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } },
      ],
    });
  });

  it('accepts a base URL written with /v1', async () => {
    const { text, error } = await drain(createProvider(settings({ baseUrl: `${fake.url}/v1/` })).stream(ask('v1')));
    expect(error).toBeUndefined();
    expect(text).toBe(echoText('v1'));
    expect(fake.requests[0].path).toBe('/v1/messages');
  });

  it('assembles tool_use blocks from input_json_delta fragments', async () => {
    const args = { city: 'Zürich', days: [1, 2], options: { metric: true, note: 'a "quoted" word' } };
    fake.script({
      type: 'tool_calls',
      text: 'One moment.',
      argumentChunks: 6,
      toolCalls: [
        { id: 'toolu_a', name: 'get_weather', arguments: args },
        { id: 'toolu_b', name: 'no_args', arguments: {} },
      ],
    });
    const { events, text, error } = await drain(createProvider(settings()).stream(ask('weather?')));
    expect(error).toBeUndefined();
    expect(text).toBe('One moment.');
    expect(events.filter((e) => e.type === 'tool_call')).toEqual([
      { type: 'tool_call', id: 'toolu_a', name: 'get_weather', arguments: args },
      { type: 'tool_call', id: 'toolu_b', name: 'no_args', arguments: {} },
    ]);
    expect(events[events.length - 1]).toEqual({ type: 'finish', reason: 'tool_calls' });
  });

  it('reports tool input that is not valid JSON as a protocol error', async () => {
    fake.script({ type: 'tool_calls', toolCalls: [{ name: 'get_weather', arguments: '{"city": ' }] });
    const { error } = await drain(createProvider(settings()).stream(ask('x')));
    expect(llmError(error).kind).toBe('protocol');
  });

  it('retries a 429 (retry-after: 0) and then succeeds', async () => {
    fake.script({ type: 'error', status: 429 }, { type: 'text', text: 'after the limit' });
    const { text, error } = await drain(createProvider(settings()).stream(ask('x')));
    expect(error).toBeUndefined();
    expect(text).toBe('after the limit');
    expect(fake.requests).toHaveLength(2);
    expect(fake.requests.every((r) => r.headers['x-api-key'] === KEY)).toBe(true);
  });

  it('retries a 500 and a 529 (overloaded) and then succeeds', async () => {
    fake.script({ type: 'error', status: 500 }, { type: 'error', status: 529, retryAfter: 0 }, { type: 'text', text: 'recovered' });
    const { text, error } = await drain(createProvider(settings()).stream(ask('x')));
    expect(error).toBeUndefined();
    expect(text).toBe('recovered');
    expect(fake.requests).toHaveLength(3);
  });

  it('maps 401 to kind auth, does not retry, and never shows the key', async () => {
    const wrongKey = 'sk-ant-WRONG-00112233445566778899';
    const { error } = await drain(createProvider(settings({ apiKey: wrongKey })).stream(ask('x')));
    const e = llmError(error);
    expect(e.kind).toBe('auth');
    expect(e.status).toBe(401);
    expect(fake.requests).toHaveLength(1);
    expect(fake.requests[0].headers['x-api-key']).toBe(wrongKey);
    expectNoKey(e, wrongKey);
  });

  it('maps 400 to bad_request and redacts a quoted key', async () => {
    fake.script({ type: 'error', status: 400, message: `x-api-key ${KEY} is not allowed to use this model` });
    const { error } = await drain(createProvider(settings()).stream(ask('x')));
    const e = llmError(error);
    expect(e.kind).toBe('bad_request');
    expect(e.code).toBe('invalid_request_error');
    expect(fake.requests).toHaveLength(1);
    expectNoKey(e);
  });

  it('treats a stream cut in the middle (socket destroyed) as an error, not a success', async () => {
    fake.script({ type: 'cut', afterChunks: 5, text: 'one two three four five six seven' });
    const { events, error } = await drain(createProvider(settings()).stream(ask('x')));
    const e = llmError(error);
    expect(['unavailable', 'protocol']).toContain(e.kind);
    expect(events.filter((ev) => ev.type === 'text').length).toBeGreaterThan(0);
    expect(events.some((ev) => ev.type === 'finish')).toBe(false);
    expectNoKey(e);
  });

  it('treats a response that ends cleanly before message_stop as a protocol error', async () => {
    fake.script({ type: 'cut', afterChunks: 100, mode: 'end' });
    const { events, error } = await drain(createProvider(settings()).stream(ask('x')));
    expect(llmError(error).kind).toBe('protocol');
    // Every event up to message_delta arrived; only message_stop was missing.
    expect(events.filter((ev) => ev.type === 'text').length).toBeGreaterThan(0);
    expect(events.some((ev) => ev.type === 'finish')).toBe(false);
  });

  it('turns `event: error` in the stream into an LlmError of the matching kind', async () => {
    fake.script({
      type: 'raw',
      body:
        sse('message_start', {
          message: { id: 'm', type: 'message', role: 'assistant', content: [], model: 'x', usage: { input_tokens: 1, output_tokens: 1 } },
        }) + sse('error', { error: { type: 'overloaded_error', message: 'Overloaded' } }),
    });
    const { error } = await drain(createProvider(settings()).stream(ask('x')));
    const e = llmError(error);
    expect(e.kind).toBe('unavailable');
    expect(e.code).toBe('overloaded_error');
  });

  it('counts prompt-cache tokens as input and maps max_tokens to length', async () => {
    fake.script({
      type: 'raw',
      body:
        sse('message_start', {
          message: {
            id: 'm',
            type: 'message',
            role: 'assistant',
            content: [],
            model: 'x',
            usage: { input_tokens: 5, cache_creation_input_tokens: 100, cache_read_input_tokens: 1000, output_tokens: 1 },
          },
        }) +
        sse('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
        sse('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'partial' } }) +
        sse('content_block_stop', { index: 0 }) +
        sse('message_delta', { delta: { stop_reason: 'max_tokens', stop_sequence: null }, usage: { output_tokens: 42 } }) +
        sse('message_stop', {}),
    });
    const { events, error } = await drain(createProvider(settings()).stream(ask('x')));
    expect(error).toBeUndefined();
    expect(events).toEqual([
      { type: 'text', delta: 'partial' },
      { type: 'usage', inputTokens: 1105, outputTokens: 42, cachedInputTokens: 1000, model: 'x' },
      { type: 'finish', reason: 'length' },
    ]);
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

  it('ends with kind cancelled when aborted during a retry backoff', async () => {
    fake.script({ type: 'error', status: 503, retryAfter: 30 });
    const controller = new AbortController();
    const started = Date.now();
    setTimeout(() => controller.abort(), 200);
    const { error } = await drain(createProvider(settings()).stream(ask('x'), { signal: controller.signal }));
    expect(llmError(error).kind).toBe('cancelled');
    expect(Date.now() - started).toBeLessThan(5000);
    expect(fake.requests).toHaveLength(1);
  });

  it('ends a stalled stream with kind timeout', async () => {
    fake.script({ type: 'hang', stage: 'headers' });
    const { error } = await drain(createProvider(settings({ timeoutMs: 300, maxRetries: 0 })).stream(ask('x')));
    expect(llmError(error).kind).toBe('timeout');
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
  });
});
