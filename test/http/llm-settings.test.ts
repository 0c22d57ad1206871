import { client, createKey, expectError, signUp, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

const URL_ = '/api/v1/tenant/settings/llm';

describe('LLM settings without a platform default', () => {
  let stack: Stack;
  let api: Client;
  beforeAll(async () => {
    stack = await startStack();
    api = client(stack.url);
  });
  afterAll(() => stack.stop());

  it('starts empty, stores settings, keeps the API key write-only', async () => {
    const a = await signUp(api, 'Llm');
    const empty = await api.get(URL_, { token: a.accessToken });
    expect(empty.body.data).toMatchObject({ provider: null, model: null, apiKeySet: false, source: 'none' });

    const apiKey = 'sk-test-' + 'k'.repeat(40);
    const set = await api.patch(URL_, { provider: 'openai', model: 'gpt-4o-mini', apiKey, temperature: 0.2 }, { token: a.accessToken });
    expect(set.status).toBe(200);
    expect(set.body.data).toMatchObject({
      provider: 'openai',
      model: 'gpt-4o-mini',
      apiKeySet: true,
      temperature: 0.2,
      maxTokens: null,
      source: 'tenant',
    });
    expect(set.text).not.toContain(apiKey);
    const got = await api.get(URL_, { token: a.accessToken });
    expect(got.body.data).toEqual(set.body.data);
    expect(got.text).not.toContain(apiKey);

    // Partial update keeps the key; null clears it.
    const partial = await api.patch(URL_, { model: 'gpt-4o' }, { token: a.accessToken });
    expect(partial.body.data).toMatchObject({ model: 'gpt-4o', apiKeySet: true, temperature: 0.2 });
    const cleared = await api.patch(URL_, { apiKey: null, temperature: null }, { token: a.accessToken });
    expect(cleared.body.data).toMatchObject({ apiKeySet: false, temperature: null });

    // The key is sealed at rest: the identity database file never holds it in clear.
    const { readFileSync, readdirSync } = await import('node:fs');
    await api.patch(URL_, { apiKey }, { token: a.accessToken });
    // identity's database files (and its write signals' folder: every file under it too).
    const files = readdirSync(stack.dataDir, { recursive: true, withFileTypes: true })
      .filter((f) => f.isFile() && `${f.parentPath}/${f.name}`.slice(stack.dataDir.length + 1).startsWith('identity.db'))
      .map((f) => `${f.parentPath}/${f.name}`);
    expect(files.some((f) => f.endsWith('identity.db'))).toBe(true);
    for (const f of files) expect(readFileSync(f).includes(apiKey)).toBe(false);
  });

  it('validates provider, baseUrl and ranges', async () => {
    const a = await signUp(api, 'LlmBad');
    expectError(await api.patch(URL_, { provider: 'skynet', model: 'x' }, { token: a.accessToken }), 400, 'VALIDATION_ERROR');
    const compat = expectError(
      await api.patch(URL_, { provider: 'openai-compatible', model: 'llama3.1' }, { token: a.accessToken }),
      400,
      'VALIDATION_ERROR',
    );
    expect(compat.details.fields).toEqual([{ field: 'baseUrl', message: 'is required for openai-compatible providers' }]);
    expectError(
      await api.patch(URL_, { provider: 'openai-compatible', model: 'm', baseUrl: 'file:///etc/passwd' }, { token: a.accessToken }),
      400,
      'VALIDATION_ERROR',
    );
    expectError(
      await api.patch(URL_, { provider: 'openai', model: 'm', temperature: 3 }, { token: a.accessToken }),
      400,
      'VALIDATION_ERROR',
    );
    expectError(
      await api.patch(URL_, { provider: 'openai', model: 'm', apiKeySet: true }, { token: a.accessToken }),
      400,
      'VALIDATION_ERROR',
    );
    expectError(await api.patch(URL_, { model: 'm' }, { token: a.accessToken }), 400, 'VALIDATION_ERROR');
    const ok = await api.patch(
      URL_,
      { provider: 'openai-compatible', model: 'llama3.1', baseUrl: 'http://127.0.0.1:11434/v1/' },
      { token: a.accessToken },
    );
    expect(ok.body.data).toMatchObject({ baseUrl: 'http://127.0.0.1:11434/v1', apiKeySet: false });
  });

  it('is tenant settings: scoped keys and members may not change it', async () => {
    const a = await signUp(api, 'LlmAccess');
    const scoped = await createKey(api, a.accessToken, { scopes: ['agents:write'] });
    expectError(await api.get(URL_, { token: scoped.key }), 403, 'FORBIDDEN');
    const member = { email: `llm${Date.now()}@example.com`, name: 'M', role: 'member', password: 'password123' };
    await api.post('/api/v1/tenant/team/members', member, { token: a.accessToken });
    const login = await api.post('/api/v1/auth/login', { email: member.email, password: member.password });
    expect((await api.get(URL_, { token: login.body.data.accessToken })).status).toBe(200);
    expectError(await api.patch(URL_, { provider: 'openai', model: 'm' }, { token: login.body.data.accessToken }), 403, 'FORBIDDEN');
    // Another tenant never sees these settings.
    await api.patch(URL_, { provider: 'anthropic', model: 'claude' }, { token: a.accessToken });
    const b = await signUp(api, 'LlmOther');
    expect((await api.get(URL_, { token: b.accessToken })).body.data.source).toBe('none');
  });
});

describe('LLM settings with a platform default', () => {
  let stack: Stack;
  let api: Client;
  beforeAll(async () => {
    stack = await startStack({
      env: {
        LLM_PROVIDER: 'openai-compatible',
        LLM_BASE_URL: 'http://127.0.0.1:11434/v1',
        LLM_MODEL: 'llama3.1',
        LLM_API_KEY: 'platform-secret-key',
      },
    });
    api = client(stack.url);
  });
  afterAll(() => stack.stop());

  it('shows the platform default to tenants without settings, without its key', async () => {
    const a = await signUp(api, 'Platform');
    const res = await api.get(URL_, { token: a.accessToken });
    expect(res.body.data).toMatchObject({
      provider: 'openai-compatible',
      model: 'llama3.1',
      baseUrl: 'http://127.0.0.1:11434/v1',
      apiKeySet: true,
      source: 'platform',
    });
    expect(res.text).not.toContain('platform-secret-key');
  });
});
