import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// GET|PUT /tenant/security/network and its effect on API-key requests. The tests reach the gateway from
// 127.0.0.1 (the gateway listens on loopback IPv4).
let stack: Stack;
let api: Client;

beforeAll(async () => {
  stack = await startStack();
  api = client(stack.url);
});
afterAll(() => stack.stop());

const N = '/api/v1/tenant/security/network';

async function tenantWithKey(): Promise<Account & { key: string }> {
  const t = await signUp(api, 'Net');
  const { key } = await createKey(api, t.accessToken);
  return { ...t, key };
}

const setList = (t: Account, ipAllowlist: unknown) => api.put(N, { ipAllowlist }, { token: t.accessToken });
/** Waits until the key's answer on GET /tenant has this status; returns how long the change took to apply. */
const keyStatusBecomes = (key: string, status: number) =>
  eventually(async () => (await api.get('/api/v1/tenant', { token: key })).status === status, 3000, 20);

it('starts empty; PUT replaces the list, normalised and deduplicated, and GET shows it', async () => {
  const t = await tenantWithKey();
  expect((await api.get(N, { token: t.accessToken })).body.data).toEqual({ ipAllowlist: [] });
  const res = await setList(t, ['127.0.0.1', ' 10.0.0.0/8 ', '10.0.0.0/08', '2001:db8::/32', '::1', '127.0.0.1']);
  expect(res.status).toBe(200);
  expect(res.body.data).toEqual({ ipAllowlist: ['127.0.0.1', '10.0.0.0/8', '2001:db8::/32', '::1'] });
  expect((await api.get(N, { token: t.accessToken })).body.data).toEqual(res.body.data);
});

it('refuses entries that are not IPs or CIDRs, naming each, and keeps the old list', async () => {
  const t = await tenantWithKey();
  await setList(t, ['192.0.2.1']);
  const bad = ['10.0.0.0/33', 'not-an-ip', '256.1.1.1', '::1/129', '10.0.0.0/8/8', '1.2.3.4/-1', 'example.com'];
  const err = expectError(await setList(t, ['127.0.0.1', ...bad]), 400, 'VALIDATION_ERROR');
  expect(err.details.fields.map((f: { field: string }) => f.field)).toEqual(bad.map((_, i) => `ipAllowlist[${i + 1}]`));
  for (const body of [
    { ipAllowlist: 'x' },
    { ipAllowlist: [1] },
    {},
    { ipAllowlist: Array(101).fill('10.0.0.1') },
    { ipAllowlist: [], extra: true },
  ])
    expectError(await api.put(N, body, { token: t.accessToken }), 400, 'VALIDATION_ERROR');
  expect((await api.get(N, { token: t.accessToken })).body.data.ipAllowlist).toEqual(['192.0.2.1']);
});

it('a key used from an address outside the list gets 403 ip_not_allowed within one second; users are not affected', async () => {
  const t = await tenantWithKey();
  expect((await api.get('/api/v1/tenant', { token: t.key })).status).toBe(200);
  await setList(t, ['203.0.113.0/24', '2001:db8::/32']);
  expect(await keyStatusBecomes(t.key, 403)).toBeLessThan(1000);
  for (const res of [
    await api.get('/api/v1/tenant', { token: t.key }),
    await api.get('/api/v1/projects', { token: t.key }),
    await api.post('/api/v1/projects', { name: 'x' }, { token: t.key }),
  ])
    expect(expectError(res, 403, 'FORBIDDEN').details.reason).toBe('ip_not_allowed');
  // The allowlist restricts key use only: the owner's session still works.
  expect((await api.get('/api/v1/tenant', { token: t.accessToken })).status).toBe(200);
  expect((await api.get('/api/v1/projects', { cookie: t.cookie })).status).toBe(200);
  expect((await api.get('/api/v1/projects', { token: t.accessToken })).body.data).toEqual([]);
});

it('an address, or a range, that matches lets the key in; clearing the list lifts the restriction', async () => {
  const t = await tenantWithKey();
  await setList(t, ['198.51.100.1']);
  await keyStatusBecomes(t.key, 403);
  for (const list of [['127.0.0.1'], ['127.0.0.0/8'], ['198.51.100.1', '127.0.0.0/30']]) {
    await setList(t, list);
    expect(await keyStatusBecomes(t.key, 200)).toBeLessThan(1000);
    await setList(t, ['198.51.100.1']);
    expect(await keyStatusBecomes(t.key, 403)).toBeLessThan(1000);
  }
  await setList(t, []);
  expect(await keyStatusBecomes(t.key, 200)).toBeLessThan(1000);
});

it('an IPv6-only list refuses an IPv4 client', async () => {
  const t = await tenantWithKey();
  await setList(t, ['::1']);
  expect(expectError(await api.get('/api/v1/tenant', { token: t.key }), 403, 'FORBIDDEN').details.reason).toBe('ip_not_allowed');
});

it('X-Forwarded-For is not believed without TRUST_PROXY', async () => {
  const t = await tenantWithKey();
  await setList(t, ['203.0.113.7']);
  for (const xff of ['203.0.113.7', '203.0.113.7, 127.0.0.1'])
    expectError(
      await api.get('/api/v1/tenant', { token: t.key, headers: { 'x-forwarded-for': xff, 'x-real-ip': '203.0.113.7' } }),
      403,
      'FORBIDDEN',
    );
});

it('only owners and admins with an unscoped credential read or change it; other tenants are untouched', async () => {
  const t = await tenantWithKey();
  const email = `net${Date.now()}@example.com`;
  await api.post('/api/v1/tenant/team/members', { email, name: 'M', role: 'member', password: 'password123' }, { token: t.accessToken });
  const member = (await api.post('/api/v1/auth/login', { email, password: 'password123' })).body.data.accessToken;
  for (const res of [await api.get(N, { token: member }), await api.put(N, { ipAllowlist: ['10.0.0.1'] }, { token: member })])
    expect(expectError(res, 403, 'FORBIDDEN').details.reason).toBe('role_required');
  const scoped = await createKey(api, t.accessToken, { scopes: ['projects:read'] });
  expectError(await api.put(N, { ipAllowlist: ['10.0.0.1'] }, { token: scoped.key }), 403, 'FORBIDDEN');
  expectError(await api.get(N), 401, 'UNAUTHORIZED');
  expect((await api.get(N, { token: t.accessToken })).body.data.ipAllowlist).toEqual([]);
  // One tenant's list never applies to another's keys.
  const other = await tenantWithKey();
  await setList(t, ['203.0.113.0/24']);
  await keyStatusBecomes(t.key, 403);
  expect((await api.get('/api/v1/tenant', { token: other.key })).status).toBe(200);
  expect((await api.get(N, { token: other.accessToken })).body.data.ipAllowlist).toEqual([]);
});
