import { createProvider, LlmError } from './index';
import { drain, echoText, startFakeOpenAI, type FakeProviderServer } from './testing';

describe('openai-compatible provider (Ollama, vLLM, llama.cpp, LM Studio) against a fake server over HTTP', () => {
  let fake: FakeProviderServer;
  const ask = (content: string) => ({ messages: [{ role: 'user' as const, content }] });

  beforeAll(async () => {
    // A server mounted under its own prefix, like a proxy or LM Studio's /api/v1; no key required, like Ollama.
    fake = await startFakeOpenAI({ basePath: '/custom/api/v1' });
  });
  afterEach(() => fake.reset());
  afterAll(() => fake.close());

  it('posts to baseUrl + /chat/completions exactly, with no Authorization header when there is no key', async () => {
    expect(fake.url).toMatch(/\/custom\/api\/v1$/);
    const provider = createProvider({ provider: 'openai-compatible', baseUrl: fake.url, model: 'llama3.1', maxTokens: 64 });
    const { text, error } = await drain(provider.stream(ask('hi ollama')));
    expect(error).toBeUndefined();
    expect(text).toBe(echoText('hi ollama'));
    expect(fake.requests).toHaveLength(1);
    expect(fake.requests[0].path).toBe('/custom/api/v1/chat/completions');
    expect(fake.requests[0].headers.authorization).toBeUndefined();
    // Compatible servers know max_tokens (OpenAI itself now wants max_completion_tokens).
    expect(fake.requests[0].body).toMatchObject({ model: 'llama3.1', max_tokens: 64, stream: true });
    expect(fake.requests[0].body).not.toHaveProperty('max_completion_tokens');
  });

  it('ignores a trailing slash on baseUrl', async () => {
    const provider = createProvider({ provider: 'openai-compatible', baseUrl: `${fake.url}/`, model: 'm' });
    await drain(provider.stream(ask('x')));
    expect(fake.requests[0].path).toBe('/custom/api/v1/chat/completions');
  });

  it('sends a configured key as Authorization: Bearer', async () => {
    const provider = createProvider({ provider: 'openai-compatible', baseUrl: fake.url, model: 'm', apiKey: 'vllm-secret-token-123' });
    await drain(provider.stream(ask('x')));
    expect(fake.requests[0].headers.authorization).toBe('Bearer vllm-secret-token-123');
  });

  it('keeps a non-OpenAI-shaped key out of error messages too', async () => {
    const key = 'vllm-secret-token-123';
    fake.script({ type: 'error', status: 403, message: `token ${key} may not use model m` });
    const provider = createProvider({ provider: 'openai-compatible', baseUrl: fake.url, model: 'm', apiKey: key });
    const { error } = await drain(provider.stream(ask('x')));
    expect(error).toBeInstanceOf(LlmError);
    expect((error as LlmError).kind).toBe('auth');
    expect((error as LlmError).message).not.toContain(key);
    expect(JSON.stringify(error)).not.toContain(key);
  });

  it("never sends this process's OPENAI_* settings to a tenant's server", async () => {
    const saved = { ...process.env };
    process.env.OPENAI_API_KEY = 'sk-platform-secret-should-not-leak';
    process.env.OPENAI_BASE_URL = 'http://127.0.0.1:1/v1';
    process.env.OPENAI_ORG_ID = 'org-platform';
    process.env.OPENAI_PROJECT_ID = 'proj-platform';
    try {
      const provider = createProvider({ provider: 'openai-compatible', baseUrl: fake.url, model: 'm' });
      const { error } = await drain(provider.stream(ask('x')));
      expect(error).toBeUndefined();
      const [request] = fake.requests;
      expect(request.path).toBe('/custom/api/v1/chat/completions');
      expect(request.headers.authorization).toBeUndefined();
      expect(request.headers['openai-organization']).toBeUndefined();
      expect(request.headers['openai-project']).toBeUndefined();
      expect(JSON.stringify(request.headers)).not.toContain('sk-platform-secret');
    } finally {
      for (const name of ['OPENAI_API_KEY', 'OPENAI_BASE_URL', 'OPENAI_ORG_ID', 'OPENAI_PROJECT_ID']) {
        if (saved[name] === undefined) delete process.env[name];
        else process.env[name] = saved[name];
      }
    }
  });

  it('copes with server quirks: tool calls without index, finish_reason stop after tool calls, no usage chunk', async () => {
    const chunk = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'llama3.1', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    fake.script({
      type: 'raw',
      body:
        chunk({ role: 'assistant', content: '' }) +
        chunk({ tool_calls: [{ id: 'call_x', type: 'function', function: { name: 'lookup', arguments: '{"q":"ollama"}' } }] }) +
        chunk({}, 'stop') +
        'data: [DONE]\n\n',
    });
    const provider = createProvider({ provider: 'openai-compatible', baseUrl: fake.url, model: 'llama3.1' });
    const { events, error } = await drain(provider.stream(ask('x')));
    expect(error).toBeUndefined();
    expect(events).toEqual([
      { type: 'tool_call', id: 'call_x', name: 'lookup', arguments: { q: 'ollama' } },
      { type: 'finish', reason: 'tool_calls' },
    ]);
  });

  it('needs a baseUrl', () => {
    expect(() => createProvider({ provider: 'openai-compatible', model: 'm' })).toThrow(LlmError);
  });
});
