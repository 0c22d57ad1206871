/**
 * The model catalogue (CONTRACT.md 12): create, list in cursor pages, get, patch and delete; validation of every
 * field; the key write-only; the effective price and where it comes from; permissions; another tenant's entry 404;
 * the MODELS_PER_TENANT cap under concurrent creates; audit entries. Base URLs are judged by the egress guard with
 * private addresses refused (no EGRESS_ALLOW_PRIVATE here).
 */
import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

const M = '/api/v1/models';
const KEY = 'sk-catalogue-' + 'k'.repeat(32);

let stack: Stack;
let api: Client;
let owner: Account;
let t: { token: string };

beforeAll(async () => {
  stack = await startStack({
    env: { EGRESS_ALLOW_PRIVATE: 'false', MODELS_PER_TENANT: '5', CREDITS_PER_USD: '1000', CREDITS_PER_1K_TOKENS: '2' },
  });
  api = client(stack.url);
  owner = await signUp(api, 'Catalogue');
  t = { token: owner.accessToken };
});
afterAll(async () => {
  await stack.stop();
});

it('creates an entry with defaults, shows the key only as apiKeySet, and reads, patches and deletes it', async () => {
  const created = await api.post(M, { name: 'fast', provider: 'openai', apiKey: KEY }, t);
  expect(created.status).toBe(201);
  expect(created.text).not.toContain(KEY);
  const entry = created.body.data;
  expect(entry).toEqual({
    id: expect.stringMatching(/^mdl_/),
    name: 'fast',
    provider: 'openai',
    upstreamModel: 'fast',
    baseUrl: null,
    apiKeySet: true,
    apiKeySecret: null,
    apiVersion: null,
    region: null,
    weight: 1,
    price: { input: 2000, output: 2000, cachedInput: 2000 },
    priceSource: 'default',
    maxOutputTokens: null,
    enabled: true,
    createdAt: expect.any(String),
    updatedAt: expect.any(String),
  });
  expect((await api.get(`${M}/${entry.id}`, t)).body.data).toEqual(entry);

  const patched = await api.patch(
    `${M}/${entry.id}`,
    { weight: 3, price: { input: 150, output: 600 }, maxOutputTokens: 256, apiKey: null, apiKeySecret: 'OPENAI_KEY', enabled: false },
    t,
  );
  expect(patched.status).toBe(200);
  expect(patched.body.data).toMatchObject({
    weight: 3,
    price: { input: 150, output: 600, cachedInput: 150 },
    priceSource: 'entry',
    maxOutputTokens: 256,
    apiKeySet: false,
    apiKeySecret: 'OPENAI_KEY',
    enabled: false,
    createdAt: entry.createdAt,
  });
  const cleared = await api.patch(`${M}/${entry.id}`, { price: null, maxOutputTokens: null }, t);
  expect(cleared.body.data).toMatchObject({ priceSource: 'default', maxOutputTokens: null, weight: 3 });

  const del = await api.del(`${M}/${entry.id}`, t);
  expect(del.body.data).toEqual({ id: entry.id, deleted: true });
  expectError(await api.get(`${M}/${entry.id}`, t), 404, 'RESOURCE_NOT_FOUND');
  expectError(await api.del(`${M}/${entry.id}`, t), 404, 'RESOURCE_NOT_FOUND');
});

it("takes the platform price list's price for a known upstream model", async () => {
  const res = await api.post(M, { name: 'listed', provider: 'openai', upstreamModel: 'gpt-4o-mini' }, t);
  expect(res.status).toBe(201);
  // gpt-4o-mini: $0.15 in, $0.60 out per million tokens, times CREDITS_PER_USD (1000).
  expect(res.body.data.priceSource).toBe('platform');
  expect(res.body.data.price.input).toBeCloseTo(150, 6);
  expect(res.body.data.price.output).toBeCloseTo(600, 6);
  await api.del(`${M}/${res.body.data.id}`, t);
});

it('refuses bad fields with the field named', async () => {
  const bad: Array<[Record<string, unknown>, string]> = [
    [{ name: 'agent:x', provider: 'openai' }, 'name'],
    [{ name: 'has space', provider: 'openai' }, 'name'],
    [{ name: 'x'.repeat(101), provider: 'openai' }, 'name'],
    [{ name: 'ok', provider: 'cohere' }, 'provider'],
    [{ name: 'ok', provider: 'openai', weight: 0 }, 'weight'],
    [{ name: 'ok', provider: 'openai', weight: 1001 }, 'weight'],
    [{ name: 'ok', provider: 'openai', weight: 1.5 }, 'weight'],
    [{ name: 'ok', provider: 'openai', price: { input: -1, output: 1 } }, 'price'],
    [{ name: 'ok', provider: 'openai', price: { input: 1 } }, 'price'],
    [{ name: 'ok', provider: 'openai-compatible' }, 'baseUrl'],
    [{ name: 'ok', provider: 'openai', apiKeySecret: 'not a name' }, 'apiKeySecret'],
    [{ name: 'ok', provider: 'openai', surprise: true }, 'surprise'],
  ];
  for (const [body, field] of bad) {
    const err = expectError(await api.post(M, body, t), 400, 'VALIDATION_ERROR');
    expect(JSON.stringify(err.details)).toContain(field);
  }
  // A base URL the egress guard refuses (loopback, link-local metadata): 400 base_url_not_allowed, at save time.
  for (const baseUrl of ['http://127.0.0.1:11434/v1', 'http://169.254.169.254/latest', 'http://localhost./v1']) {
    const err = expectError(await api.post(M, { name: 'local', provider: 'openai-compatible', baseUrl }, t), 400, 'VALIDATION_ERROR');
    expect(err.details.reason).toBe('base_url_not_allowed');
  }
  expect((await api.get(M, t)).body.data).toEqual([]);
});

it('lists in cursor pages, newest first; several entries may share a name', async () => {
  const ids: string[] = [];
  for (const i of [1, 2, 3])
    ids.push((await api.post(M, { name: 'shared', provider: 'anthropic', upstreamModel: `claude-${i}` }, t)).body.data.id);
  const first = await api.get(`${M}?limit=2`, t);
  expect(first.body.data.map((m: { id: string }) => m.id)).toEqual([ids[2], ids[1]]);
  expect(first.body.meta.pagination).toEqual({ limit: 2, next_cursor: expect.any(String), has_more: true });
  const second = await api.get(`${M}?limit=2&cursor=${first.body.meta.pagination.next_cursor}`, t);
  expect(second.body.data.map((m: { id: string }) => m.id)).toEqual([ids[0]]);
  expect(second.body.meta.pagination.has_more).toBe(false);
  for (const id of ids) await api.del(`${M}/${id}`, t);
});

it('lets any credential of the tenant read, only owners, admins and unscoped keys write; other tenants see 404', async () => {
  const entry = (await api.post(M, { name: 'perm', provider: 'openai' }, t)).body.data;
  const scoped = await createKey(api, owner.accessToken, { scopes: ['projects:read'] });
  const unscoped = await createKey(api, owner.accessToken);
  expect((await api.get(M, { token: scoped.key })).status).toBe(200);
  expect((await api.get(`${M}/${entry.id}`, { token: scoped.key })).body.data.id).toBe(entry.id);
  expectError(await api.patch(`${M}/${entry.id}`, { weight: 2 }, { token: scoped.key }), 403, 'FORBIDDEN');
  expectError(await api.post(M, { name: 'x', provider: 'openai' }, { token: scoped.key }), 403, 'FORBIDDEN');
  expect((await api.patch(`${M}/${entry.id}`, { weight: 2 }, { token: unscoped.key })).body.data.weight).toBe(2);

  const member = { email: `models${Date.now()}@example.com`, name: 'M', role: 'member', password: 'password123' };
  await api.post('/api/v1/tenant/team/members', member, t);
  const login = await api.post('/api/v1/auth/login', { email: member.email, password: member.password });
  const m = { token: login.body.data.accessToken as string };
  expect((await api.get(`${M}/${entry.id}`, m)).status).toBe(200);
  expectError(await api.del(`${M}/${entry.id}`, m), 403, 'FORBIDDEN');

  const other = await signUp(api, 'CatalogueOther');
  const o = { token: other.accessToken };
  expectError(await api.get(`${M}/${entry.id}`, o), 404, 'RESOURCE_NOT_FOUND');
  expectError(await api.patch(`${M}/${entry.id}`, { weight: 5 }, o), 404, 'RESOURCE_NOT_FOUND');
  expectError(await api.del(`${M}/${entry.id}`, o), 404, 'RESOURCE_NOT_FOUND');
  expect((await api.get(M, o)).body.data).toEqual([]);
  expect((await api.get(`${M}/${entry.id}`, t)).body.data.weight).toBe(2);
  await api.del(`${M}/${entry.id}`, t);
});

it('holds MODELS_PER_TENANT exactly under concurrent creates, and a delete frees a place', async () => {
  const a = await signUp(api, 'CatalogueCap');
  const at = { token: a.accessToken };
  const results = await Promise.all(Array.from({ length: 12 }, (_, i) => api.post(M, { name: `m${i}`, provider: 'openai' }, at)));
  const created = results.filter((r) => r.status === 201);
  expect(created).toHaveLength(5);
  for (const r of results.filter((r) => r.status !== 201)) expect(r.status).toBe(409);
  expect((await api.get(`${M}?limit=100`, at)).body.data).toHaveLength(5);
  await api.del(`${M}/${created[0].body.data.id}`, at);
  expect((await api.post(M, { name: 'again', provider: 'openai' }, at)).status).toBe(201);
});

it('records model.created, model.updated and model.deleted in the audit log, never a key', async () => {
  const a = await signUp(api, 'CatalogueAudit');
  const at = { token: a.accessToken };
  const id = (await api.post(M, { name: 'audited', provider: 'openai', apiKey: KEY }, at)).body.data.id;
  await api.patch(`${M}/${id}`, { weight: 7 }, at);
  await api.del(`${M}/${id}`, at);
  let entries: Array<{ action: string; target: { type: string; id: string }; changes: unknown }> = [];
  await eventually(async () => {
    entries = (await api.get('/api/v1/audit-log?limit=100', at)).body.data.filter((e: { action: string }) => e.action.startsWith('model.'));
    return entries.length === 3;
  });
  expect(entries.map((e) => e.action)).toEqual(['model.deleted', 'model.updated', 'model.created']);
  for (const e of entries) expect(e.target).toEqual({ type: 'model', id });
  expect(JSON.stringify(entries)).not.toContain(KEY);
  expect(entries[1].changes).toMatchObject({ before: { weight: 1 }, after: { weight: 7, hasApiKey: true } });
});
