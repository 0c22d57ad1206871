import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createClient } from '@svc/kit';
import { startIdentity } from '@svc/identity';
import { identityV1 } from '@svc/proto';
import { client, createKey, expectError, signUp, type Account, type Client, type Res } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

const OLD_KEY = randomBytes(32).toString('base64');
const NEW_KEY = randomBytes(32).toString('base64');

let stack: Stack;
let api: Client;
let owner: Account;
let t: { token: string };
/** Every response of this suite: no secret value may appear in any of them. */
const seen: Res[] = [];
const values: string[] = [];
const value = (label: string) => {
  const v = `${label}-${randomBytes(12).toString('hex')}-ünï`;
  values.push(v);
  return v;
};
const track = async (p: Promise<Res>) => {
  const res = await p;
  seen.push(res);
  return res;
};

beforeAll(async () => {
  stack = await startStack({ env: { SVC_MASTER_KEY: OLD_KEY } });
  api = client(stack.url);
  owner = await signUp(api, 'Secretive');
  t = { token: owner.accessToken };
});
afterAll(async () => {
  for (const res of seen) for (const v of values) expect(res.text).not.toContain(v);
  await stack.stop();
});

it('creates, reads, versions and deletes a secret, showing only metadata', async () => {
  const created = await track(api.post('/api/v1/secrets', { name: 'OPENAI_KEY', value: value('v1'), description: 'for the bot' }, t));
  expect(created.status).toBe(201);
  expect(created.body.data).toEqual({
    name: 'OPENAI_KEY',
    description: 'for the bot',
    version: 1,
    createdAt: expect.any(String),
    updatedAt: expect.any(String),
  });
  expectError(await track(api.post('/api/v1/secrets', { name: 'OPENAI_KEY', value: value('dup') }, t)), 409, 'CONFLICT');

  const v2 = await track(api.put('/api/v1/secrets/OPENAI_KEY', { value: value('v2') }, t));
  expect(v2.body.data).toMatchObject({ name: 'OPENAI_KEY', version: 2, createdAt: created.body.data.createdAt });
  const v3 = await track(api.put('/api/v1/secrets/OPENAI_KEY', { value: value('v3') }, t));
  expect(v3.body.data.version).toBe(3);
  expect((await track(api.get('/api/v1/secrets/OPENAI_KEY', t))).body.data).toEqual(v3.body.data);

  const del = await track(api.del('/api/v1/secrets/OPENAI_KEY', t));
  expect(del.body.data).toEqual({ name: 'OPENAI_KEY', deleted: true });
  expectError(await track(api.get('/api/v1/secrets/OPENAI_KEY', t)), 404, 'RESOURCE_NOT_FOUND');
  expectError(await track(api.put('/api/v1/secrets/OPENAI_KEY', { value: value('gone') }, t)), 404, 'RESOURCE_NOT_FOUND');
  expect((await track(api.post('/api/v1/secrets', { name: 'OPENAI_KEY', value: value('again') }, t))).body.data.version).toBe(1);
});

it('lists newest first, a page at a time', async () => {
  const other = await signUp(api, 'Lister');
  const o = { token: other.accessToken };
  for (const name of ['A_ONE', 'A_TWO', 'A_THREE']) await track(api.post('/api/v1/secrets', { name, value: value(name) }, o));
  const first = await track(api.get('/api/v1/secrets?limit=2', o));
  expect(first.body.data.map((s: { name: string }) => s.name)).toEqual(['A_THREE', 'A_TWO']);
  expect(first.body.meta.pagination).toEqual({ limit: 2, next_cursor: expect.any(String), has_more: true });
  const second = await track(api.get(`/api/v1/secrets?limit=2&cursor=${first.body.meta.pagination.next_cursor}`, o));
  expect(second.body.data.map((s: { name: string }) => s.name)).toEqual(['A_ONE']);
  expect(second.body.meta.pagination.has_more).toBe(false);
});

it('refuses bad names and values with 400', async () => {
  for (const name of ['1ABC', 'a-b', 'has space', 'x'.repeat(129), '', 'ÜBER']) {
    const err = expectError(await track(api.post('/api/v1/secrets', { name, value: value('bad') }, t)), 400, 'VALIDATION_ERROR');
    expect([...new Set(err.details.fields.map((f: { field: string }) => f.field))]).toEqual(['name']);
  }
  expectError(await track(api.post('/api/v1/secrets', { name: 'EMPTY', value: '' }, t)), 400, 'VALIDATION_ERROR');
  expectError(await track(api.post('/api/v1/secrets', { name: 'BIG', value: 'x'.repeat(65_537) }, t)), 400, 'VALIDATION_ERROR');
  expectError(await track(api.post('/api/v1/secrets', { name: 'EXTRA', value: value('x'), version: 9 }, t)), 400, 'VALIDATION_ERROR');
  expectError(await track(api.get('/api/v1/secrets/not-a-name', t)), 404, 'RESOURCE_NOT_FOUND');
});

it('holds keys to secrets:read and secrets:write', async () => {
  await track(api.post('/api/v1/secrets', { name: 'SCOPED', value: value('scoped') }, t));
  const reader = (await createKey(api, owner.accessToken, { scopes: ['secrets:read'] })).key;
  const writer = (await createKey(api, owner.accessToken, { scopes: ['secrets:write'] })).key;
  const unrelated = (await createKey(api, owner.accessToken, { scopes: ['projects:read'] })).key;
  const unscoped = (await createKey(api, owner.accessToken)).key;

  expect((await track(api.get('/api/v1/secrets/SCOPED', { token: reader }))).status).toBe(200);
  expect((await track(api.get('/api/v1/secrets', { token: reader }))).status).toBe(200);
  for (const res of [
    await track(api.post('/api/v1/secrets', { name: 'BY_READER', value: value('r') }, { token: reader })),
    await track(api.put('/api/v1/secrets/SCOPED', { value: value('r') }, { token: reader })),
    await track(api.del('/api/v1/secrets/SCOPED', { token: reader })),
  ])
    expect(expectError(res, 403, 'FORBIDDEN').details).toEqual({ reason: 'missing_scope', requiredScope: 'secrets:write' });

  expect((await track(api.put('/api/v1/secrets/SCOPED', { value: value('w') }, { token: writer }))).body.data.version).toBe(2);
  expectError(await track(api.get('/api/v1/secrets/SCOPED', { token: writer })), 403, 'FORBIDDEN');
  expectError(await track(api.get('/api/v1/secrets', { token: unrelated })), 403, 'FORBIDDEN');
  expect((await track(api.get('/api/v1/secrets/SCOPED', { token: unscoped }))).body.data.version).toBe(2);
});

it('never shows or touches another tenant’s secret', async () => {
  const other = await signUp(api, 'Neighbour');
  const o = { token: other.accessToken };
  await track(api.post('/api/v1/secrets', { name: 'NEIGHBOUR_ONLY', value: value('n') }, o));
  for (const res of [
    await track(api.get('/api/v1/secrets/NEIGHBOUR_ONLY', t)),
    await track(api.put('/api/v1/secrets/NEIGHBOUR_ONLY', { value: value('hijack') }, t)),
    await track(api.del('/api/v1/secrets/NEIGHBOUR_ONLY', t)),
  ])
    expect(expectError(res, 404, 'RESOURCE_NOT_FOUND').details).toEqual({ resource: 'secret', id: 'NEIGHBOUR_ONLY' });
  // The name is free in this tenant: names are per tenant.
  expect((await track(api.post('/api/v1/secrets', { name: 'NEIGHBOUR_ONLY', value: value('mine') }, t))).status).toBe(201);
  expect((await track(api.get('/api/v1/secrets/NEIGHBOUR_ONLY', o))).body.data.version).toBe(1);
  expect((await track(api.get('/api/v1/secrets?limit=100', t))).text).not.toContain(other.tenantId);
});

it('keeps values encrypted at rest and survives a master key rotation without downtime', async () => {
  const before = value('sealed-under-old');
  await track(api.post('/api/v1/secrets', { name: 'ROTATED', value: before }, t));
  const dbText = () =>
    ['identity.db', 'identity.db-wal']
      .map((f) => join(stack.dataDir, f))
      .filter((f) => existsSync(f))
      .map((f) => readFileSync(f).toString('latin1'))
      .join('');
  expect(dbText()).not.toContain(before);

  // Rotate: the new key first, the old one kept for what it sealed. Identity restarts on the same port.
  const port = stack.identity.port;
  await stack.services.identity.stop();
  const identity = await startIdentity({ ...stack.env, IDENTITY_PORT: String(port), SVC_MASTER_KEY: `${NEW_KEY},${OLD_KEY}` });
  stack.services.identity = identity;
  const rpc = createClient(identityV1.IdentityServiceService, `127.0.0.1:${port}`, { deadlineMs: 5000 });
  try {
    // Old data reads: the secret, and the signing keys that sign every token (sign-in still works). The first call
    // may find the fresh channel still connecting on a loaded machine: it is retried while UNAVAILABLE.
    let old: Awaited<ReturnType<typeof rpc.resolveSecret>> | null = null;
    for (let i = 0; !old; i++) {
      old = await rpc.resolveSecret({ name: 'ROTATED' }, { token: owner.accessToken }).catch((err: { code?: string }) => {
        if (err.code !== 'SERVICE_UNAVAILABLE' || i >= 30) throw err;
        return new Promise<null>((r) => setTimeout(() => r(null), 100));
      });
    }
    expect(old.value).toBe(before);
    const relogin = await track(api.post('/api/v1/auth/login', { email: owner.email, password: owner.password }));
    expect(relogin.status).toBe(200);
    // New writes use the new key (k2; k1 is the old one).
    const after = value('sealed-under-new');
    expect((await track(api.put('/api/v1/secrets/ROTATED', { value: after }, t))).body.data.version).toBe(2);
    const resolved = await rpc.resolveSecret({ name: 'ROTATED' }, { token: owner.accessToken });
    expect(resolved).toEqual({ name: 'ROTATED', version: 2, value: after });
    expect(dbText()).toMatch(/v1\.k2\./);
    expect(dbText()).not.toContain(after);
  } finally {
    rpc.close();
  }
});
