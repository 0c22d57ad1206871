import { client, createKey, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// Issue 13's findings, fixed: the usual security headers, no caching of answers that carry tokens or secrets,
// numbers in query strings only as decimals, JSON only in UTF-8, and a cap on API keys per tenant.
let stack: Stack;
let api: Client;
let owner: Account;

beforeAll(async () => {
  stack = await startStack({
    env: {
      API_KEYS_PER_TENANT: '3',
      PROJECTS_PER_TENANT: '2',
      AGENTS_PER_TENANT: '2',
      SECRETS_PER_TENANT: '2',
      MEMBERS_PER_TENANT: '2',
      CHAT_SESSIONS_PER_TENANT: '2',
      MCP_SERVERS_PER_TENANT: '2',
      EGRESS_ALLOW_PRIVATE: 'true',
      MCP_CALL_TIMEOUT_S: '1',
    },
  });
  api = client(stack.url);
  owner = await signUp(api, 'Hardened');
});
afterAll(() => stack.stop());

it('sends nosniff and the API security headers on every answer, errors and unknown routes included', async () => {
  for (const res of [
    await api.get('/api/v1/tenant', { token: owner.accessToken }),
    await api.get('/api/v1/tenant'),
    await api.get('/api/v1/nothing-here'),
    await api.get('/healthz'),
  ]) {
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    expect(res.headers.get('x-frame-options')).toBe('DENY');
    expect(res.headers.get('content-security-policy')).toBe("default-src 'none';frame-ancestors 'none'");
    expect(res.headers.get('referrer-policy')).toBe('no-referrer');
  }
});

it('marks every API answer no-store, those that carry tokens and keys first of all; public documents stay cacheable', async () => {
  const login = await api.post('/api/v1/auth/login', { email: owner.email, password: owner.password });
  const refresh = await api.post('/api/v1/auth/refresh', { refreshToken: login.body.data.refreshToken });
  const register = await api.post('/api/v1/auth/register', {
    email: `h${Date.now()}@example.com`,
    password: 'a long password',
    name: 'N',
    tenantName: 'T',
  });
  const key = await api.post('/api/v1/api-keys', { name: 'k', type: 'sdk', environment: 'development' }, { token: owner.accessToken });
  for (const res of [login, refresh, register, key]) {
    expect(res.status).toBeLessThan(300);
    expect(res.headers.get('cache-control')).toBe('no-store');
  }
  expect((await api.get('/api/v1/openapi.json')).headers.get('cache-control')).not.toBe('no-store');
  expect((await api.get('/.well-known/jwks.json')).headers.get('cache-control')).not.toBe('no-store');
});

it.each(['0x10', '1e1', '0b1', '0o7', ' 16', '16 ', '+16', '16.0', 'Infinity'])(
  'refuses ?limit=%j: only plain decimals are numbers',
  async (value) => {
    const res = await api.get(`/api/v1/projects?limit=${encodeURIComponent(value)}`, { token: owner.accessToken });
    expect(expectError(res, 400, 'VALIDATION_ERROR').details.fields).toEqual([{ field: 'limit', message: expect.any(String) }]);
  },
);

it('still reads ?limit=16', async () => {
  expect((await api.get('/api/v1/projects?limit=16', { token: owner.accessToken })).body.meta.pagination.limit).toBe(16);
});

it.each(['utf-16', 'UTF-16LE', 'iso-8859-1', '"utf-32"'])(
  'refuses a JSON body declared as charset=%s with 415, changing nothing',
  async (charset) => {
    const res = await api.request('POST', '/api/v1/projects', {
      token: owner.accessToken,
      raw: JSON.stringify({ name: 'declared elsewhere' }),
      headers: { 'content-type': `application/json; charset=${charset}` },
    });
    expectError(res, 415, 'UNSUPPORTED_MEDIA_TYPE');
    const names = (await api.get('/api/v1/projects?limit=100', { token: owner.accessToken })).body.data.map(
      (p: { name: string }) => p.name,
    );
    expect(names).not.toContain('declared elsewhere');
  },
);

it('accepts charset=utf-8 in any spelling', async () => {
  for (const charset of ['utf-8', 'UTF-8', 'utf8', '"utf-8"']) {
    const fresh = await signUp(api, `Charset ${charset}`); // a tenant per project: this stack caps projects at 2
    const res = await api.request('POST', '/api/v1/projects', {
      token: fresh.accessToken,
      raw: JSON.stringify({ name: `ok ${charset}` }),
      headers: { 'content-type': `application/json; charset=${charset}` },
    });
    expect(res.status).toBe(201);
  }
});

it('caps live API keys per tenant (API_KEYS_PER_TENANT); a revoked key frees its place', async () => {
  const a = await signUp(api, 'Capped');
  const keys = [];
  for (let i = 0; i < 3; i++) keys.push(await createKey(api, a.accessToken));
  const over = await api.post(
    '/api/v1/api-keys',
    { name: 'one too many', type: 'sdk', environment: 'development' },
    { token: a.accessToken },
  );
  expect(expectError(over, 409, 'CONFLICT').details).toEqual({ reason: 'api_key_limit', limit: 3 });
  expect((await api.del(`/api/v1/api-keys/${keys[0].id}`, { token: a.accessToken })).status).toBe(200);
  expect(
    (await api.post('/api/v1/api-keys', { name: 'in its place', type: 'sdk', environment: 'development' }, { token: a.accessToken }))
      .status,
  ).toBe(201);
});

it('caps every collection a tenant grows (projects, agents, secrets, members, chat sessions, MCP servers); deleting one frees its place', async () => {
  const a = await signUp(api, 'Grower');
  const t = { token: a.accessToken };
  const kinds = [
    { path: '/api/v1/projects', reason: 'project_limit', body: (i: number) => ({ name: `p${i}` }) },
    { path: '/api/v1/agents', reason: 'agent_limit', body: (i: number) => ({ name: `a${i}`, systemPrompt: 'help' }) },
    { path: '/api/v1/secrets', reason: 'secret_limit', body: (i: number) => ({ name: `S${i}`, value: 'v' }) },
    { path: '/api/v1/chat/sessions', reason: 'chat_session_limit', body: (i: number) => ({ title: `s${i}` }) },
    // A closed loopback port: registered with status error, counted all the same.
    { path: '/api/v1/mcp-servers', reason: 'mcp_server_limit', body: (i: number) => ({ name: `m${i}`, url: 'http://127.0.0.1:9/mcp' }) },
  ];
  for (const k of kinds) {
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) {
      const res = await api.post(k.path, k.body(i), t);
      expect(res.status).toBe(201);
      ids.push(res.body.data.id ?? res.body.data.name); // secrets are named, not numbered
    }
    const over = await api.post(k.path, k.body(2), t);
    expect(expectError(over, 409, 'CONFLICT').details).toEqual({ reason: k.reason, limit: 2 });
    // Another tenant is not affected by this one's count.
    const b = await signUp(api, `Other ${k.reason}`);
    expect((await api.post(k.path, k.body(0), { token: b.accessToken })).status).toBe(201);
    expect((await api.del(`${k.path}/${ids[0]}`, t)).status).toBe(200);
    expect((await api.post(k.path, k.body(3), t)).status).toBe(201);
  }
  // Members: the owner counts as one.
  const member = { email: `m-${Date.now()}@example.com`, name: 'M', password: 'a-long-password-1', role: 'member' };
  expect((await api.post('/api/v1/tenant/team/members', member, t)).status).toBe(201);
  const over = await api.post('/api/v1/tenant/team/members', { ...member, email: `n-${member.email}` }, t);
  expect(expectError(over, 409, 'CONFLICT').details).toEqual({ reason: 'member_limit', limit: 2 });
  // A pending invitation holds a member's place.
  const invite = await api.post('/api/v1/tenant/team/invitations', { email: `i-${member.email}`, role: 'member' }, t);
  expect(expectError(invite, 409, 'CONFLICT').details).toEqual({ reason: 'member_limit', limit: 2 });
});
