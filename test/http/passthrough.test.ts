/**
 * `/v1/passthrough/:provider/*` (CONTRACT.md 9, issue 21 part 3): embeddings forwarded to the tenant's provider (the
 * fake) with the tenant's stored key put in and the caller's credential never passed on; metered from the usage the
 * provider reports, per key; API keys only, scope `llm:passthrough`; the egress guard at connect time; size limits.
 */
import { hostname } from 'node:os';
import { startGateway, type RunningGateway } from '@svc/gateway';
import { startFakeAnthropic, startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, createKey, eventually, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

let stack: Stack;
let strict: RunningGateway;
let api: Client;
let openai: FakeProviderServer;
let anthropic: FakeProviderServer;
let owner: Account;
let key: { key: string; id: string };
const TENANT_KEY = 'sk-tenant-openai-' + 't'.repeat(32);
const ANTHROPIC_KEY = 'sk-ant-tenant-' + 'n'.repeat(32);
const LLM = '/api/v1/tenant/settings/llm';
const EMBED = '/v1/passthrough/openai/embeddings';

beforeAll(async () => {
  // On every interface: the machine's host name (a private or loopback address) must reach it, were it let through.
  openai = await startFakeOpenAI({ apiKey: TENANT_KEY, host: '0.0.0.0' });
  anthropic = await startFakeAnthropic({ apiKey: ANTHROPIC_KEY });
  stack = await startStack({
    env: { EGRESS_ALLOW_PRIVATE: 'true', PASSTHROUGH_MAX_REQUEST_BYTES: '4096', PASSTHROUGH_MAX_RESPONSE_BYTES: '8192' },
  });
  // A second gateway on the same services, with the egress guard closed as in production.
  strict = await startGateway({ ...stack.env, PORT: '0', INSTANCE_ID: 'gw-strict', EGRESS_ALLOW_PRIVATE: 'false' });
  api = client(stack.url);
  owner = await signUp(api, 'Passthrough');
  const saved = await api.patch(
    LLM,
    {
      provider: 'openai',
      model: 'gpt-chat',
      baseUrl: openai.url.replace('0.0.0.0', '127.0.0.1'),
      apiKey: TENANT_KEY,
      fallbacks: [{ provider: 'anthropic', model: 'claude-x', baseUrl: anthropic.url, apiKey: ANTHROPIC_KEY }],
    },
    { token: owner.accessToken },
  );
  expect(saved.status).toBe(200);
  key = await createKey(api, owner.accessToken, { scopes: ['llm:passthrough'] });
});
afterAll(async () => {
  await strict.stop();
  await stack.stop();
  await openai.close();
  await anthropic.close();
});
beforeEach(() => {
  openai.reset();
  anthropic.reset();
});

const embeddings = (token: string | undefined, body: unknown = { model: 'text-embedding-3-small', input: ['alpha', 'beta gamma'] }) =>
  api.post(EMBED, body, token ? { token } : {});

/** The OpenAI error shape, with our request id header. */
function expectOpenAiError(res: { status: number; body: any; headers: Headers }, status: number, type: string, code?: string) {
  expect(res.status).toBe(status);
  expect(Object.keys(res.body)).toEqual(['error']);
  expect(Object.keys(res.body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(res.body.error).toMatchObject({ message: expect.any(String), type, code: code ?? expect.any(String) });
  expect(res.headers.get('x-request-id')).toBeTruthy();
}

it("forwards embeddings to the tenant's provider with the tenant's key; the caller's header never arrives", async () => {
  const res = await embeddings(key.key);
  expect(res.status).toBe(200);
  expect(res.body).toMatchObject({
    object: 'list',
    model: 'text-embedding-3-small',
    data: [
      { object: 'embedding', index: 0, embedding: expect.any(Array) },
      { object: 'embedding', index: 1, embedding: expect.any(Array) },
    ],
    usage: { prompt_tokens: 5, total_tokens: 5 },
  });
  expect(res.headers.get('x-request-id')).toMatch(/.+/);
  expect(openai.requests).toHaveLength(1);
  const seen = openai.requests[0];
  expect(seen).toMatchObject({
    method: 'POST',
    path: '/v1/embeddings',
    body: { model: 'text-embedding-3-small', input: ['alpha', 'beta gamma'] },
  });
  expect(seen.headers.authorization).toBe(`Bearer ${TENANT_KEY}`);
  expect(JSON.stringify(seen.headers)).not.toContain(key.key);
  expect(JSON.stringify(seen.headers)).not.toContain('svc_');
  expect(seen.headers.cookie).toBeUndefined();
});

it('meters the usage the provider reported, under the key, and counts the request per key', async () => {
  const fresh = await createKey(api, owner.accessToken, { scopes: ['llm:passthrough'] });
  expect((await embeddings(fresh.key, { model: 'embed-metered', input: 'count me please' })).status).toBe(200);
  const from = new Date(Date.now() - 3_600_000).toISOString();
  const to = new Date(Date.now() + 3_600_000).toISOString();
  let rows: any[] = [];
  await eventually(async () => {
    rows = (await api.get(`/api/v1/billing/usage?from=${from}&to=${to}&groupBy=model,apiKey`, { token: owner.accessToken })).body.data;
    return rows.some((r) => r.model === 'embed-metered');
  });
  expect(rows.find((r) => r.model === 'embed-metered')).toMatchObject({
    apiKeyId: fresh.id,
    calls: 1,
    inputTokens: 4,
    outputTokens: 0,
    credits: 1,
  });
  const view = (await api.get(`/api/v1/api-keys/${fresh.id}`, { token: owner.accessToken })).body.data;
  expect(view.usage.requestsThisMinute).toBe(1);
  // Nothing left reserved once the call is settled.
  await eventually(async () => (await api.get('/api/v1/billing/summary', { token: owner.accessToken })).body.data.credits.reserved === 0);
});

it("puts the anthropic key in Anthropic's header, under the version root", async () => {
  await api.post('/v1/passthrough/anthropic/messages/count_tokens', { model: 'claude-x', messages: [] }, { token: key.key });
  expect(anthropic.requests).toHaveLength(1);
  expect(anthropic.requests[0].path).toBe('/v1/messages/count_tokens');
  expect(anthropic.requests[0].headers).toMatchObject({ 'x-api-key': ANTHROPIC_KEY, 'anthropic-version': '2023-06-01' });
  expect(anthropic.requests[0].headers.authorization).toBeUndefined();
});

it('refuses a key without the scope (403), and any credential that is not an API key (401), before the provider', async () => {
  const other = await createKey(api, owner.accessToken, { scopes: ['projects:read'] });
  expectOpenAiError(await embeddings(other.key), 403, 'permission_error');
  expectOpenAiError(await embeddings(owner.accessToken), 401, 'authentication_error', 'api_key_required');
  expectOpenAiError(await api.post(EMBED, {}, { cookie: owner.cookie, headers: { origin: stack.url } }), 401, 'authentication_error');
  expectOpenAiError(await embeddings(undefined), 401, 'authentication_error');
  expectOpenAiError(await embeddings('svc_sdk_' + 'x'.repeat(43)), 401, 'authentication_error');
  // An unscoped key may (it has every scope).
  expect((await embeddings((await createKey(api, owner.accessToken)).key)).status).toBe(200);
  expect(openai.requests).toHaveLength(1);
});

it('refuses an address the egress guard forbids when the connection opens', async () => {
  // Saved while private egress was allowed (a name of this machine); the strict gateway refuses it at connect time.
  const tenant = await signUp(api, 'Guarded');
  const port = new URL(openai.url).port;
  expect(
    (
      await api.patch(
        LLM,
        { provider: 'openai', model: 'm', baseUrl: `http://${hostname()}:${port}/v1`, apiKey: TENANT_KEY },
        { token: tenant.accessToken },
      )
    ).status,
  ).toBe(200);
  const guardedKey = (await createKey(api, tenant.accessToken, { scopes: ['llm:passthrough'] })).key;
  const res = await client(strict.url).post(EMBED, { model: 'm', input: 'x' }, { token: guardedKey });
  expectOpenAiError(res, 400, 'invalid_request_error', 'base_url_not_allowed');
  expect(res.body.error.message).toMatch(/not a global unicast/);
  expect(openai.requests).toHaveLength(0);
  // Nothing stays reserved for the refused call.
  await eventually(async () => (await api.get('/api/v1/billing/summary', { token: tenant.accessToken })).body.data.credits.reserved === 0);
});

it('caps the request and the response size', async () => {
  const big = await embeddings(key.key, { model: 'm', input: 'x'.repeat(5000) });
  expectOpenAiError(big, 413, 'invalid_request_error');
  expect(openai.requests).toHaveLength(0);
  const many = await embeddings(key.key, { model: 'm', input: Array.from({ length: 200 }, (_, i) => `word ${i}`) });
  expectOpenAiError(many, 503, 'server_error', 'response_too_large');
});

it('answers a provider the tenant has not configured, or does not exist, in the OpenAI shape', async () => {
  const bare = await signUp(api, 'Bare');
  await api.patch(
    LLM,
    { provider: 'openai', model: 'm', apiKey: TENANT_KEY, baseUrl: openai.url.replace('0.0.0.0', '127.0.0.1') },
    { token: bare.accessToken },
  );
  const bareKey = (await createKey(api, bare.accessToken, { scopes: ['llm:passthrough'] })).key;
  expectOpenAiError(
    await api.post('/v1/passthrough/anthropic/messages', {}, { token: bareKey }),
    400,
    'invalid_request_error',
    'provider_not_configured',
  );
  expectOpenAiError(await api.post('/v1/passthrough/mistral/embeddings', {}, { token: bareKey }), 404, 'not_found_error');
});

it('cancels the provider request when its caller leaves before the answer, and gives the hold back', async () => {
  openai.script({ type: 'hang' });
  const caller = new AbortController();
  const sent = fetch(stack.url + EMBED, {
    method: 'POST',
    headers: { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'text-embedding-3-small', input: 'left early' }),
    signal: caller.signal,
  });
  await eventually(async () => openai.requests.length === 1);
  caller.abort();
  await expect(sent).rejects.toThrow();
  // Not held until PASSTHROUGH_TIMEOUT_MS (60 s): the provider sees its request closed, and no cancel id reaches it.
  await eventually(async () => openai.requests[0].aborted);
  expect(Object.keys(openai.requests[0].headers).filter((h) => h.startsWith('x-svc'))).toEqual([]);
  await eventually(async () => (await api.get('/api/v1/billing/summary', { token: owner.accessToken })).body.data.credits.reserved === 0);
});
