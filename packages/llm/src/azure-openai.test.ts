import { collect, createProvider, LlmError, type LlmSettings } from './index';
import { drain, echoText, fakeEmbedding, llmError, startFakeAzureOpenAI, waitUntil, type FakeProviderServer } from './testing';

const KEY = '0123456789abcdef0123456789abcdef';

describe('azure-openai provider against a fake Azure OpenAI resource over HTTP', () => {
  let fake: FakeProviderServer;
  const settings = (over: Partial<LlmSettings> = {}): LlmSettings => ({
    provider: 'azure-openai',
    apiKey: KEY,
    baseUrl: fake.url,
    model: 'gpt-4o-prod',
    apiVersion: '2024-10-21',
    ...over,
  });
  const ask = (content: string) => ({ messages: [{ role: 'user' as const, content }] });

  beforeAll(async () => {
    fake = await startFakeAzureOpenAI({ apiKey: KEY, apiVersions: ['2024-10-21', '2025-01-01-preview'] });
  });
  afterEach(() => fake.reset());
  afterAll(() => fake.close());

  it('streams from the deployment URL with api-version and the api-key header (no bearer token)', async () => {
    fake.script({ type: 'text', text: 'Hello from Azure.', chunks: 3, usage: { inputTokens: 12, outputTokens: 4, cachedInputTokens: 8 } });
    const { events, text, error } = await drain(createProvider(settings({ maxTokens: 30 })).stream(ask('hi')));
    expect(error).toBeUndefined();
    expect(text).toBe('Hello from Azure.');
    expect(events.slice(-2)).toEqual([
      { type: 'usage', inputTokens: 12, outputTokens: 4, cachedInputTokens: 8, model: 'gpt-4o-prod' },
      { type: 'finish', reason: 'stop' },
    ]);
    const [request] = fake.requests;
    expect(request.path).toBe('/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21');
    expect(request.headers['api-key']).toBe(KEY);
    expect(request.headers.authorization).toBeUndefined();
    expect(request.body).toMatchObject({ stream: true, stream_options: { include_usage: true }, max_completion_tokens: 30 });
  });

  it('takes the request model as the deployment, a default api-version, and an endpoint written with /openai', async () => {
    const provider = createProvider(settings({ apiVersion: undefined, baseUrl: `${fake.url}/openai/` }));
    const reply = await collect(provider.stream({ ...ask('not streamed'), model: 'other-deployment' }));
    expect(reply.text).toBe(echoText('not streamed'));
    expect(reply.finishReason).toBe('stop');
    expect(reply.usage).toEqual({ inputTokens: 3, outputTokens: 5 });
    expect(fake.requests[0].path).toBe('/openai/deployments/other-deployment/chat/completions?api-version=2024-10-21');
  });

  it('treats a stream cut after tokens as an error, never a silent finish', async () => {
    fake.script({ type: 'cut', afterChunks: 3, text: 'one two three four five six' });
    const { events, error } = await drain(createProvider(settings()).stream(ask('x')));
    expect(['unavailable', 'protocol']).toContain(llmError(error).kind);
    expect(events.some((e) => e.type === 'text')).toBe(true);
    expect(events.some((e) => e.type === 'finish')).toBe(false);
  });

  it('maps a 429 with Retry-After to rate_limited with retryAfterMs, and retries a short one', async () => {
    fake.script({ type: 'error', status: 429, retryAfter: 120 });
    const { error } = await drain(createProvider(settings()).stream(ask('x')));
    const e = llmError(error);
    expect(e).toMatchObject({ kind: 'rate_limited', status: 429, retryAfterMs: 120_000, provider: 'azure-openai' });
    expect(fake.requests).toHaveLength(1);

    fake.reset();
    fake.script({ type: 'error', status: 429, retryAfter: 0 });
    const retried = await drain(createProvider(settings()).stream(ask('again')));
    expect(retried.error).toBeUndefined();
    expect(fake.requests).toHaveLength(2);
  });

  it('maps a wrong key to auth without the key, and an unknown api-version or deployment to bad_request', async () => {
    const wrong = await drain(createProvider(settings({ apiKey: 'ffffffffffffffffffffffffffffffff' })).stream(ask('x')));
    expect(llmError(wrong.error)).toMatchObject({ kind: 'auth', status: 401 });
    expect(JSON.stringify(wrong.error)).not.toContain('ffffffffffffffff');
    const version = await drain(createProvider(settings({ apiVersion: '2020-01-01' })).stream(ask('x')));
    expect(llmError(version.error)).toMatchObject({ kind: 'bad_request', status: 404 });
    const gone = await startFakeAzureOpenAI({ deployments: ['only-this'] });
    try {
      const missing = await drain(createProvider(settings({ baseUrl: gone.url })).stream(ask('x')));
      expect(llmError(missing.error)).toMatchObject({ kind: 'bad_request', status: 404, code: 'DeploymentNotFound' });
    } finally {
      await gone.close();
    }
  });

  it('closes the connection when the caller aborts while the resource hangs', async () => {
    fake.script({ type: 'hang' });
    const controller = new AbortController();
    const stream = createProvider(settings()).stream(ask('x'), { signal: controller.signal });
    const drained = drain(stream);
    await waitUntil(() => fake.requests.length === 1, 5000, 'the request to arrive');
    controller.abort();
    expect(llmError((await drained).error).kind).toBe('cancelled');
    await waitUntil(() => fake.requests[0].aborted, 5000, 'the fake to see the connection close');
  });

  it('embeds on the deployment URL, with dimensions and usage', async () => {
    const provider = createProvider(settings());
    const result = await provider.embed!({ model: 'embed-deployment', input: ['alpha', 'beta gamma'], dimensions: 4 });
    expect(result).toEqual({ vectors: [fakeEmbedding('alpha', 4), fakeEmbedding('beta gamma', 4)], inputTokens: 2 + 3 });
    expect(fake.requests[0].path).toBe('/openai/deployments/embed-deployment/embeddings?api-version=2024-10-21');
    expect(fake.requests[0].body).toMatchObject({ input: ['alpha', 'beta gamma'], dimensions: 4, encoding_format: 'float' });
  });

  it('needs a key and an endpoint', () => {
    expect(() => createProvider({ provider: 'azure-openai', baseUrl: 'https://x.openai.azure.com' })).toThrow(LlmError);
    expect(() => createProvider({ provider: 'azure-openai', apiKey: KEY })).toThrow(LlmError);
  });
});
