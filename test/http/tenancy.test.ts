import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { isOpenAiError } from '../helpers/openapi';
import { startStack, type Stack } from '../helpers/stack';

// Every route that takes an id, from the OpenAPI document: another tenant's id is a 404 naming the id (never a
// 403, never the resource), and the resource is left as it was.
let stack: Stack;
let api: Client;
let mine: Account;
let theirs: Account;
let llm: FakeProviderServer;
/** Ids of `theirs`, by the path parameter that names them (resolved by the route's collection). */
const theirIds: Record<string, string> = {};

beforeAll(async () => {
  // Private addresses allowed: their webhook points at a closed port on loopback.
  stack = await startStack({ env: { EGRESS_ALLOW_PRIVATE: 'true' } });
  api = client(stack.url);
  mine = await signUp(api, 'Mine');
  theirs = await signUp(api, 'Theirs');
  const t = { token: theirs.accessToken };
  theirIds['/api/v1/projects'] = (await api.post('/api/v1/projects', { name: 'theirs' }, t)).body.data.id;
  theirIds['/api/v1/api-keys'] = (await createKey(api, theirs.accessToken)).id;
  theirIds['/api/v1/tenant/team/members'] = (
    await api.post(
      '/api/v1/tenant/team/members',
      { email: `t${Date.now()}@example.com`, name: 'T', role: 'member', password: 'password123' },
      t,
    )
  ).body.data.userId;
  theirIds['/api/v1/tenant/team/invitations'] = (
    await api.post('/api/v1/tenant/team/invitations', { email: `i${Date.now()}@example.com`, role: 'member' }, t)
  ).body.data.id;
  theirIds['/api/v1/agents'] = (await api.post('/api/v1/agents', { name: 'theirs', systemPrompt: 'p', config: {} }, t)).body.data.id;
  const hook = (
    await api.post('/api/v1/webhooks', { url: 'http://127.0.0.1:9/theirs', events: ['project.deleted'], secret: 'whsec-theirs-1' }, t)
  ).body.data.id;
  theirIds['/api/v1/webhooks'] = hook;
  theirIds.deliveryId = (await api.post(`/api/v1/webhooks/${hook}/test`, undefined, t)).body.data.id;
  theirIds['/api/v1/chat/sessions'] = (await api.post('/api/v1/chat/sessions', { title: 'theirs' }, t)).body.data.id;
  theirIds.run_id = 'run_none'; // a run needs a model; their agent id is what must answer 404
  // Regions name the tenant in the path: theirs must be a 404 like any other id of theirs.
  for (const collection of ['/api/v1/regions/preferences', '/api/v1/regions/storage', '/api/v1/regions/features'])
    theirIds[collection] = theirs.tenantId;
  theirIds.featureKey = 'agents';
  await api.post('/api/v1/secrets', { name: 'THEIR_TOKEN', value: 'their-secret-value' }, t);
  theirIds['/api/v1/secrets'] = 'THEIR_TOKEN';
  // An MCP server of theirs (a closed port: registered with status error), its token from their secret.
  theirIds['/api/v1/mcp-servers'] = (
    await api.post(
      '/api/v1/mcp-servers',
      { name: 'theirs', url: 'http://127.0.0.1:9/mcp', auth: { type: 'bearer', secret: 'THEIR_TOKEN' } },
      t,
    )
  ).body.data.id;
  // Their events reach the event log through the bus: their tenant.created, once it is there.
  await eventually(async () => (await api.get('/api/v1/events?type=tenant.created', t)).body.data.length === 1, 10_000);
  theirIds['/api/v1/events'] = (await api.get('/api/v1/events?type=tenant.created', t)).body.data[0].id;
  // A response of theirs on the OpenAI-compatible API (their model is a fake provider on loopback).
  llm = await startFakeOpenAI();
  await api.patch('/api/v1/tenant/settings/llm', { provider: 'openai', baseUrl: llm.url, model: 'gpt-test', apiKey: 'sk-theirs' }, t);
  const theirKey = (await createKey(api, theirs.accessToken)).key;
  const created = await api.post('/v1/responses', { model: 'gpt-test', input: 'hello' }, { token: theirKey });
  expect(created.body.status).toBe('completed');
  theirIds['/v1/responses'] = created.body.id;
  // A catalogue entry of theirs.
  theirIds['/api/v1/models'] = (
    await api.post('/api/v1/models', { name: 'their-model', provider: 'openai-compatible', baseUrl: llm.url, apiKey: 'sk-theirs' }, t)
  ).body.data.id;
  // That model call in their request log, once billing has settled it.
  await eventually(async () => (await api.get('/api/v1/requests', t)).body.data.length === 1, 10_000);
  theirIds['/api/v1/requests'] = (await api.get('/api/v1/requests', t)).body.data[0].id;
});
afterAll(async () => {
  await stack.stop();
  await llm.close();
});

/** A minimal valid body for routes that take one, so that the id check is what answers. */
const VALID_BODIES: Record<string, unknown> = {
  'PATCH /api/v1/projects/{id}': { name: 'hijacked' },
  'PATCH /api/v1/api-keys/{id}': { limits: { requestsPerMinute: 1 } },
  'PATCH /api/v1/tenant/team/members/{userId}': { role: 'admin' },
  'PATCH /api/v1/agents/{id}': { name: 'hijacked' },
  'POST /api/v1/agents/{id}/execute': { goal: 'take over', projectId: 'prj_none' },
  'POST /api/v1/agents/{id}/runs/{run_id}/reject': {},
  'PATCH /api/v1/webhooks/{id}': { url: 'http://127.0.0.1:9/hijacked' },
  'POST /api/v1/webhooks/{id}/recover': { since: '2020-01-01T00:00:00.000Z' },
  'POST /api/v1/chat/sessions/{id}/messages': { content: 'take over' },
  'PATCH /api/v1/regions/preferences/{tenantId}': { primaryRegion: 'eu-west' },
  'PUT /api/v1/regions/storage/{tenantId}': { storageMode: 'platform', platformRegion: 'eu-west' },
  'PUT /api/v1/secrets/{name}': { value: 'hijacked' },
  'PATCH /api/v1/mcp-servers/{id}': { name: 'hijacked' },
  'PATCH /api/v1/models/{id}': { name: 'hijacked', enabled: false },
};

it('answers 404 RESOURCE_NOT_FOUND with {resource, id} on every id route for another tenant’s ids', async () => {
  const doc = (await api.get('/api/v1/openapi.json')).body;
  const mineKey = (await createKey(api, mine.accessToken)).key;
  const checked: string[] = [];
  type Op = { requestBody?: { required?: boolean }; 'x-access'?: string };
  for (const [path, all] of Object.entries(doc.paths as Record<string, Record<string, Op>>)) {
    // Public routes (sign-in, OAuth, payment webhooks) hold no tenant's data: nothing of another tenant to reach.
    const methods = Object.fromEntries(Object.entries(all).filter(([, o]) => o['x-access'] !== 'public'));
    const first = path.indexOf('/{');
    if (first < 0 || Object.keys(methods).length === 0) continue;
    const collection = path.slice(0, first);
    expect(theirIds[collection]).toBeDefined(); // a new resource with id routes belongs in theirIds above
    // The first parameter names their resource of this collection; later ones their sub-resources.
    let n = 0;
    const concrete = path.replace(/\{(\w+)\}/g, (_, name: string) => (n++ === 0 ? theirIds[collection] : theirIds[name]));
    expect(concrete).not.toContain('undefined');
    for (const [method, op] of Object.entries(methods).map(([m, o]) => [m.toUpperCase(), o] as const)) {
      const name = `${method} ${path}`;
      const body = VALID_BODIES[name];
      if (op.requestBody?.required) expect(body).toBeDefined();
      for (const credential of [{ token: mine.accessToken }, { token: mineKey }]) {
        if (path.startsWith('/api/v1/api-keys') && !credential.token.startsWith('ey')) continue; // keys: user sessions only
        if (path.startsWith('/v1/')) {
          // The OpenAI-compatible API: API keys only, and OpenAI's error shape.
          if (credential.token.startsWith('ey')) continue;
          const res = await api.request(method, concrete, { ...credential, body });
          expect({ status: res.status, openAiShape: isOpenAiError(res), code: res.body?.error?.code }).toEqual({
            status: 404,
            openAiShape: true,
            code: 'resource_not_found',
          });
          expect(res.text).not.toContain('theirs');
          continue;
        }
        const res = await api.request(method, concrete, { ...credential, body });
        const err = expectError(res, 404, 'RESOURCE_NOT_FOUND');
        expect(err.details).toEqual({ resource: expect.any(String), id: expect.any(String) });
        expect(Object.values(theirIds)).toContain(err.details.id);
        expect(res.text).not.toContain('theirs');
      }
      checked.push(name);
    }
  }
  expect(checked.sort()).toEqual(
    expect.arrayContaining([
      'DELETE /api/v1/api-keys/{id}',
      'GET /api/v1/api-keys/{id}',
      'PATCH /api/v1/api-keys/{id}',
      'POST /api/v1/api-keys/{id}/rotate',
      'DELETE /api/v1/projects/{id}',
      'GET /api/v1/projects/{id}',
      'PATCH /api/v1/projects/{id}',
      'DELETE /api/v1/tenant/team/members/{userId}',
      'PATCH /api/v1/tenant/team/members/{userId}',
      'POST /api/v1/agents/{id}/execute',
      'GET /api/v1/agents/{id}/runs/{run_id}',
      'POST /api/v1/webhooks/{id}/test',
      'POST /api/v1/webhooks/{id}/deliveries/{deliveryId}/retry',
      'POST /api/v1/webhooks/{id}/recover',
      'GET /api/v1/events/{id}',
      'GET /api/v1/chat/sessions/{id}/stream',
      'POST /api/v1/chat/sessions/{id}/messages',
      'GET /api/v1/regions/preferences/{tenantId}',
      'PATCH /api/v1/regions/preferences/{tenantId}',
      'GET /api/v1/regions/storage/{tenantId}',
      'PUT /api/v1/regions/storage/{tenantId}',
      'POST /api/v1/regions/storage/{tenantId}/validate',
      'GET /api/v1/regions/features/{tenantId}/check/{featureKey}',
      'GET /api/v1/secrets/{name}',
      'PUT /api/v1/secrets/{name}',
      'DELETE /api/v1/secrets/{name}',
      'GET /api/v1/mcp-servers/{id}',
      'PATCH /api/v1/mcp-servers/{id}',
      'DELETE /api/v1/mcp-servers/{id}',
      'POST /api/v1/mcp-servers/{id}/refresh',
      'GET /v1/responses/{id}',
      'POST /v1/responses/{id}/cancel',
      'GET /api/v1/requests/{id}',
      'GET /api/v1/models/{id}',
      'PATCH /api/v1/models/{id}',
      'DELETE /api/v1/models/{id}',
    ]),
  );
  // Nothing of theirs changed.
  const t = { token: theirs.accessToken };
  expect((await api.get(`/api/v1/projects/${theirIds['/api/v1/projects']}`, t)).body.data.name).toBe('theirs');
  expect((await api.get(`/api/v1/api-keys/${theirIds['/api/v1/api-keys']}`, t)).status).toBe(200);
  const team = (await api.get('/api/v1/tenant/team/members', t)).body.data;
  expect(team.find((m: { userId: string }) => m.userId === theirIds['/api/v1/tenant/team/members']).role).toBe('member');
  expect((await api.get(`/api/v1/agents/${theirIds['/api/v1/agents']}`, t)).body.data.name).toBe('theirs');
  const hook = (await api.get(`/api/v1/webhooks/${theirIds['/api/v1/webhooks']}`, t)).body.data;
  expect(hook).toMatchObject({ url: 'http://127.0.0.1:9/theirs', active: true });
  const deliveries = (await api.get(`/api/v1/webhooks/${hook.id}/deliveries`, t)).body.data;
  expect(deliveries).toHaveLength(1); // only their own test event: no test event or re-send from us
  const chat = `/api/v1/chat/sessions/${theirIds['/api/v1/chat/sessions']}`;
  expect((await api.get(`${chat}/messages`, t)).body.data).toEqual([]);
  expect((await api.get(`/api/v1/regions/preferences/${theirs.tenantId}`, t)).body.data.primaryRegion).toBe('us-east');
  expect((await api.get(`/api/v1/regions/storage/${theirs.tenantId}`, t)).body.data.platformRegion).toBe('us-east');
  expect((await api.get('/api/v1/secrets/THEIR_TOKEN', t)).body.data.version).toBe(1);
  expect((await api.get(`/api/v1/mcp-servers/${theirIds['/api/v1/mcp-servers']}`, t)).body.data.name).toBe('theirs');
  const theirKey = (await createKey(api, theirs.accessToken)).key;
  expect((await api.get(`/v1/responses/${theirIds['/v1/responses']}`, { token: theirKey })).body.status).toBe('completed');
  expect((await api.get(`/api/v1/models/${theirIds['/api/v1/models']}`, t)).body.data).toMatchObject({
    name: 'their-model',
    enabled: true,
  });
});

it('lists never show another tenant’s items', async () => {
  for (const path of [
    '/api/v1/projects',
    '/api/v1/api-keys',
    '/api/v1/tenant/team/members',
    '/api/v1/agents',
    '/api/v1/webhooks',
    '/api/v1/chat/sessions',
    '/api/v1/secrets',
    '/api/v1/events',
    '/api/v1/mcp-servers',
    '/api/v1/requests',
    '/api/v1/models',
  ]) {
    const text = (await api.get(`${path}?limit=100`, { token: mine.accessToken })).text;
    for (const id of Object.values(theirIds)) expect(text).not.toContain(id);
    expect(text).not.toContain(theirs.userId);
  }
});
