import { collect, createProvider, LlmError, sendHttp, type LlmSettings, type LlmTransport } from './index';
import {
  bedrockEventFrame,
  bedrockExceptionFrame,
  drain,
  echoText,
  fakeEmbedding,
  llmError,
  startFakeBedrock,
  waitUntil,
  type FakeProviderServer,
} from './testing';

const ACCESS_KEY_ID = 'AKIAFAKE0123456789AB';
const SECRET = 'fAkE/SeCrEt+0123456789abcdefghijklmnopqr';
const API_KEY = 'ABSKQmVkcm9ja0FQSUtleS1mYWtlLWtleQ==';

describe('bedrock provider (the AWS SDK, SigV4) against a fake Bedrock runtime over HTTP', () => {
  let fake: FakeProviderServer;
  const settings = (over: Partial<LlmSettings> = {}): LlmSettings => ({
    provider: 'bedrock',
    apiKey: `${ACCESS_KEY_ID}:${SECRET}`,
    region: 'eu-west-3',
    baseUrl: fake.url,
    model: 'anthropic.claude-3-5-haiku-20241022-v1:0',
    ...over,
  });
  const ask = (content: string) => ({ messages: [{ role: 'user' as const, content }] });

  beforeAll(async () => {
    fake = await startFakeBedrock({ region: 'eu-west-3', accessKeyId: ACCESS_KEY_ID, apiKey: API_KEY });
  });
  afterEach(() => fake.reset());
  afterAll(() => fake.close());

  it('streams ConverseStream signed with SigV4: text, then usage from metadata (cache reads included), then finish', async () => {
    fake.script({
      type: 'text',
      text: 'Bedrock streams this.',
      chunks: 3,
      usage: { inputTokens: 30, outputTokens: 6, cachedInputTokens: 20 },
    });
    const { events, text, error } = await drain(createProvider(settings({ maxTokens: 64, temperature: 0.1 })).stream(ask('hi')));
    expect(error).toBeUndefined();
    expect(text).toBe('Bedrock streams this.');
    expect(events.filter((e) => e.type === 'text')).toHaveLength(3);
    expect(events.slice(-2)).toEqual([
      { type: 'usage', inputTokens: 30, outputTokens: 6, cachedInputTokens: 20 },
      { type: 'finish', reason: 'stop' },
    ]);
    const [request] = fake.requests;
    expect(request.path).toBe(`/model/${encodeURIComponent('anthropic.claude-3-5-haiku-20241022-v1:0')}/converse-stream`);
    expect(request.headers.authorization).toMatch(
      new RegExp(
        `^AWS4-HMAC-SHA256 Credential=${ACCESS_KEY_ID}/\\d{8}/eu-west-3/bedrock/aws4_request, SignedHeaders=[^,]*host[^,]*, Signature=[0-9a-f]{64}$`,
      ),
    );
    expect(String(request.headers.authorization)).not.toContain(SECRET);
    expect(request.body).toMatchObject({
      messages: [{ role: 'user', content: [{ text: 'hi' }] }],
      inferenceConfig: { maxTokens: 64, temperature: 0.1 },
    });
  });

  it('sends a Bedrock API key as a bearer token instead of signing', async () => {
    const { text, error } = await drain(createProvider(settings({ apiKey: API_KEY })).stream(ask('bearer')));
    expect(error).toBeUndefined();
    expect(text).toBe(echoText('bearer'));
    expect(fake.requests[0].headers.authorization).toBe(`Bearer ${API_KEY}`);
  });

  it('sends system, toolConfig, toolUse and toolResult blocks, and assembles streamed tool calls', async () => {
    fake.script({
      type: 'tool_calls',
      text: 'Looking.',
      argumentChunks: 4,
      toolCalls: [{ id: 'tooluse_1', name: 'lookup', arguments: { q: 'paris', n: [1, 2] } }],
    });
    const reply = await collect(
      createProvider(settings()).stream({
        messages: [
          { role: 'system', content: 'Use tools.' },
          { role: 'user', content: 'Find Paris' },
          { role: 'assistant', content: '', toolCalls: [{ id: 't0', name: 'lookup', arguments: { q: 'x' } }] },
          { role: 'tool', toolCallId: 't0', content: 'nothing' },
        ],
        tools: [{ name: 'lookup', description: 'Looks up', parameters: { type: 'object', properties: { q: { type: 'string' } } } }],
      }),
    );
    expect(reply).toMatchObject({
      text: 'Looking.',
      toolCalls: [{ id: 'tooluse_1', name: 'lookup', arguments: { q: 'paris', n: [1, 2] } }],
      finishReason: 'tool_calls',
    });
    expect(fake.requests[0].body).toMatchObject({
      system: [{ text: 'Use tools.' }],
      messages: [
        { role: 'user', content: [{ text: 'Find Paris' }] },
        { role: 'assistant', content: [{ toolUse: { toolUseId: 't0', name: 'lookup', input: { q: 'x' } } }] },
        { role: 'user', content: [{ toolResult: { toolUseId: 't0', content: [{ text: 'nothing' }] } }] },
      ],
      toolConfig: { tools: [{ toolSpec: { name: 'lookup', description: 'Looks up', inputSchema: { json: { type: 'object' } } } }] },
    });
    expect(fake.requests[0].conversation?.tools).toEqual(['lookup']);
  });

  it('collects a whole reply (not streamed by the caller), maps max_tokens to length', async () => {
    fake.script({ type: 'text', text: 'short', finishReason: 'length', usage: { inputTokens: 3, outputTokens: 1 } });
    expect(await collect(createProvider(settings()).stream(ask('x')))).toEqual({
      text: 'short',
      toolCalls: [],
      usage: { inputTokens: 3, outputTokens: 1 },
      finishReason: 'length',
    });
  });

  it('treats a stream cut after tokens as an error: socket reset, or a clean end before messageStop', async () => {
    fake.script({ type: 'cut', afterChunks: 3, text: 'one two three four five six' });
    const reset = await drain(createProvider(settings()).stream(ask('x')));
    expect(llmError(reset.error).kind).toBe('unavailable');
    expect(reset.events.some((e) => e.type === 'text')).toBe(true);
    expect(reset.events.some((e) => e.type === 'finish')).toBe(false);

    fake.script({ type: 'cut', afterChunks: 3, mode: 'end', text: 'one two three four five six' });
    const ended = await drain(createProvider(settings()).stream(ask('x')));
    expect(llmError(ended.error).kind).toBe('protocol');
    expect(ended.text).toBe('one two ');
    expect(ended.events.some((e) => e.type === 'finish')).toBe(false);
  });

  it('turns an exception sent inside the event stream into an LlmError of its kind', async () => {
    const frames = [
      bedrockEventFrame('messageStart', { role: 'assistant' }),
      bedrockEventFrame('contentBlockDelta', { contentBlockIndex: 0, delta: { text: 'partial' } }),
      bedrockExceptionFrame('throttlingException', 'Too many tokens, please wait before trying again.'),
    ];
    fake.script({ type: 'raw', body: Buffer.concat(frames).toString('base64') });
    const { error, text } = await drain(createProvider(settings()).stream(ask('x')));
    expect(text).toBe('partial');
    expect(llmError(error)).toMatchObject({ kind: 'rate_limited', code: 'ThrottlingException' });
  });

  it('maps a 429 with Retry-After to rate_limited with retryAfterMs, and retries a short one', async () => {
    fake.script({ type: 'error', status: 429, retryAfter: 90 });
    const { error } = await drain(createProvider(settings()).stream(ask('x')));
    expect(llmError(error)).toMatchObject({
      kind: 'rate_limited',
      status: 429,
      retryAfterMs: 90_000,
      code: 'ThrottlingException',
      provider: 'bedrock',
    });
    expect(fake.requests).toHaveLength(1);

    fake.reset();
    fake.script(
      { type: 'error', status: 429, retryAfter: 0 },
      { type: 'error', status: 503, retryAfter: 0 },
      { type: 'text', text: 'third time' },
    );
    expect((await collect(createProvider(settings()).stream(ask('x')))).text).toBe('third time');
    expect(fake.requests).toHaveLength(3);
  });

  it('maps a wrong key to auth (never showing the secret) and a validation error to bad_request', async () => {
    const wrong = await drain(createProvider(settings({ apiKey: `AKIAWRONG00000000000:${SECRET}` })).stream(ask('x')));
    const e = llmError(wrong.error);
    expect(e).toMatchObject({ kind: 'auth', status: 403 });
    expect(JSON.stringify(e) + e.message).not.toContain(SECRET);
    fake.script({ type: 'error', status: 400, message: 'The model returned the following errors: bad input' });
    const bad = await drain(createProvider(settings()).stream(ask('x')));
    expect(llmError(bad.error)).toMatchObject({ kind: 'bad_request', status: 400, code: 'ValidationException' });
  });

  it('ends a stalled stream with kind timeout after timeoutMs of silence', async () => {
    fake.script({ type: 'hang' });
    const { error } = await drain(createProvider(settings({ timeoutMs: 300 })).stream(ask('x')));
    expect(llmError(error).kind).toBe('timeout');
  });

  it('closes the connection when the caller aborts while Bedrock hangs', async () => {
    fake.script({ type: 'hang' });
    const controller = new AbortController();
    const drained = drain(createProvider(settings()).stream(ask('x'), { signal: controller.signal }));
    await waitUntil(() => fake.requests.length === 1, 5000, 'the request to arrive');
    controller.abort();
    expect(llmError((await drained).error).kind).toBe('cancelled');
    await waitUntil(() => fake.requests[0].aborted, 5000, 'the fake to see the connection close');
  });

  it('sends every request through the injected transport (the egress guard), and its refusal comes out as is', async () => {
    let calls = 0;
    const counting: LlmTransport = (url, init) => {
      calls++;
      return sendHttp(url, init);
    };
    expect((await drain(createProvider(settings({ transport: counting })).stream(ask('x')))).error).toBeUndefined();
    expect(calls).toBe(1);
    const refused = new LlmError('bad_request', 'the LLM base URL is not allowed: private address', { code: 'egress_address' });
    const guard: LlmTransport = async () => {
      throw refused;
    };
    expect((await drain(createProvider(settings({ transport: guard })).stream(ask('x')))).error).toBe(refused);
  });

  it('embeds with Titan text embeddings v2 through InvokeModel, one call per input', async () => {
    const provider = createProvider(settings());
    const result = await provider.embed!({ model: 'amazon.titan-embed-text-v2:0', input: ['alpha', 'beta beta'], dimensions: 256 });
    expect(result).toEqual({ vectors: [fakeEmbedding('alpha', 256), fakeEmbedding('beta beta', 256)], inputTokens: 2 + 3 });
    expect(fake.requests.map((r) => [r.path, r.body])).toEqual([
      [`/model/${encodeURIComponent('amazon.titan-embed-text-v2:0')}/invoke`, { inputText: 'alpha', dimensions: 256 }],
      [`/model/${encodeURIComponent('amazon.titan-embed-text-v2:0')}/invoke`, { inputText: 'beta beta', dimensions: 256 }],
    ]);
  });

  it('refuses token arrays (Titan embeds texts only) before any request', async () => {
    const err = await createProvider(settings()).embed!({ model: 'amazon.titan-embed-text-v2:0', input: [[7]] }).catch((e: unknown) => e);
    expect(llmError(err)).toMatchObject({ kind: 'bad_request', code: 'token_inputs_not_supported' });
    expect(fake.requests).toHaveLength(0);
  });

  it('embeddings: a 429 is rate_limited with retryAfterMs', async () => {
    fake.script({ type: 'error', status: 429, retryAfter: 120 });
    const err = await createProvider(settings()).embed!({ model: 'amazon.titan-embed-text-v2:0', input: ['x'] }).catch((e: unknown) => e);
    expect(llmError(err)).toMatchObject({ kind: 'rate_limited', retryAfterMs: 120_000 });
  });

  it("never uses this process's AWS_* credentials, token or endpoint", async () => {
    const names = [
      'AWS_ACCESS_KEY_ID',
      'AWS_SECRET_ACCESS_KEY',
      'AWS_BEARER_TOKEN_BEDROCK',
      'AWS_ENDPOINT_URL',
      'AWS_ENDPOINT_URL_BEDROCK_RUNTIME',
      'AWS_REGION',
    ];
    const saved = Object.fromEntries(names.map((n) => [n, process.env[n]]));
    Object.assign(process.env, {
      AWS_ACCESS_KEY_ID: 'AKIAPLATFORM00000000',
      AWS_SECRET_ACCESS_KEY: 'platform-secret',
      AWS_BEARER_TOKEN_BEDROCK: 'platform-bearer-token',
      AWS_ENDPOINT_URL: 'http://127.0.0.1:1',
      AWS_ENDPOINT_URL_BEDROCK_RUNTIME: 'http://127.0.0.1:1',
      AWS_REGION: 'us-west-2',
    });
    try {
      for (const apiKey of [`${ACCESS_KEY_ID}:${SECRET}`, API_KEY]) {
        fake.reset();
        expect((await drain(createProvider(settings({ apiKey })).stream(ask('x')))).error).toBeUndefined();
        const auth = String(fake.requests[0].headers.authorization);
        expect(auth).not.toContain('PLATFORM');
        expect(auth).not.toContain('platform');
      }
    } finally {
      for (const n of names) {
        if (saved[n] === undefined) delete process.env[n];
        else process.env[n] = saved[n];
      }
    }
  });

  it('needs a region and a key', () => {
    expect(() => createProvider({ provider: 'bedrock', apiKey: API_KEY, model: 'm' })).toThrow(LlmError);
    expect(() => createProvider({ provider: 'bedrock', region: 'us-east-1', model: 'm' })).toThrow(LlmError);
    expect(() => createProvider({ provider: 'bedrock', region: 'us-east-1', apiKey: ':secret' })).toThrow(LlmError);
  });
});
