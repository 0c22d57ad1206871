import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';
import { readAll } from '../helpers/tokens';

// API keys exactly as CONTRACT.md 3: types and prefixes, environments, scopes, expiry, shown once, hash only,
// managed from a user session only, revocation within one second.
let stack: Stack;
let api: Client;
let owner: Account;

beforeAll(async () => {
  stack = await startStack();
  api = client(stack.url);
  owner = await signUp(api, 'Keys');
});
afterAll(() => stack.stop());

const K = '/api/v1/api-keys';
const PREFIXES = { sdk: 'svc_sdk_', cli: 'svc_cli_', ci: 'svc_ci_', integration: 'svc_int_', marketplace: 'svc_mkt_' } as const;

describe('creating keys', () => {
  it.each(Object.entries(PREFIXES))(
    'type %s gets the prefix %s, a long random secret and start = its first 12 characters',
    async (type, prefix) => {
      const res = await api.post(K, { name: `${type} key`, type, environment: 'production' }, { token: owner.accessToken });
      expect(res.status).toBe(201);
      const k = res.body.data;
      expect(Object.keys(k).sort()).toEqual(
        ['createdAt', 'environment', 'expiresAt', 'id', 'key', 'lastUsedAt', 'limits', 'name', 'scopes', 'start', 'type', 'usage'].sort(),
      );
      expect(k).toMatchObject({ name: `${type} key`, type, environment: 'production', scopes: null, lastUsedAt: null, expiresAt: null });
      expect(k.createdAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      expect(k.key.startsWith(prefix)).toBe(true);
      // At least 32 random bytes: 43 base62 characters carry 256 bits.
      expect(k.key.slice(prefix.length)).toMatch(/^[A-Za-z0-9]{43,}$/);
      expect(k.start).toBe(k.key.slice(0, 12));
      // The key works as a credential.
      expect((await api.get('/api/v1/tenant', { token: k.key })).body.data.id).toBe(owner.tenantId);
    },
  );

  it.each(['development', 'staging', 'production'])('accepts the %s environment and shows it on /auth/me', async (environment) => {
    const { key, id } = await createKey(api, owner.accessToken, { environment });
    const me = await api.get('/api/v1/auth/me', { token: key });
    expect(me.status).toBe(200);
    // An unscoped key: no scopes in the credential.
    expect(me.body.data.credential).toEqual({ type: 'api_key', id, environment });
    expect(me.body.data).toMatchObject({ user: { id: owner.userId }, tenant: { id: owner.tenantId }, role: 'owner' });
  });

  it('refuses an unknown type, environment or scope with 400 naming each field', async () => {
    const before = (await api.get(`${K}?limit=100`, { token: owner.accessToken })).body.data.length;
    const bad = [
      [{ type: 'root' }, 'type'],
      [{ type: 'SDK' }, 'type'],
      [{ environment: 'Production' }, 'environment'],
      [{ environment: 'test' }, 'environment'],
      [{ scopes: ['projects:read', 'admin:all'] }, 'scopes'],
      [{ scopes: ['projects:*'] }, 'scopes'],
    ] as const;
    for (const [patch, field] of bad) {
      const res = await api.post(K, { name: 'bad', type: 'sdk', environment: 'development', ...patch }, { token: owner.accessToken });
      const err = expectError(res, 400, 'VALIDATION_ERROR');
      expect(err.details.fields.map((f: { field: string }) => f.field)).toContain(field);
    }
    expect((await api.get(`${K}?limit=100`, { token: owner.accessToken })).body.data.length).toBe(before);
  });

  it('refuses an expiresAt in the past or not a timestamp with 400', async () => {
    for (const expiresAt of [new Date(Date.now() - 60_000).toISOString(), 'tomorrow', '2020-01-01T00:00:00.000Z']) {
      const err = expectError(
        await api.post(K, { name: 'x', type: 'sdk', environment: 'development', expiresAt }, { token: owner.accessToken }),
        400,
        'VALIDATION_ERROR',
      );
      expect(err.details.fields.map((f: { field: string }) => f.field)).toContain('expiresAt');
    }
  });

  it('keeps a future expiresAt, normalised to ISO 8601 UTC with milliseconds', async () => {
    const at = new Date(Date.now() + 86400_000);
    const res = await api.post(
      K,
      { name: 'x', type: 'sdk', environment: 'development', expiresAt: at.toISOString() },
      { token: owner.accessToken },
    );
    expect(res.status).toBe(201);
    expect(res.body.data.expiresAt).toBe(at.toISOString());
  });

  it('a key past its expiresAt is refused with 401', async () => {
    const res = await api.post(
      K,
      { name: 'short', type: 'ci', environment: 'staging', expiresAt: new Date(Date.now() + 1500).toISOString() },
      { token: owner.accessToken },
    );
    expect(res.status).toBe(201);
    const key = res.body.data.key;
    expect((await api.get('/api/v1/tenant', { token: key })).status).toBe(200);
    await eventually(async () => (await api.get('/api/v1/tenant', { token: key })).status === 401, 5000, 100);
    expectError(await api.get('/api/v1/auth/me', { token: key }), 401, 'UNAUTHORIZED');
  });
});

describe('the secret is shown once and only its hash is stored', () => {
  it('GET list and GET by id never carry the key or its hash', async () => {
    const created = (await api.post(K, { name: 'secret', type: 'sdk', environment: 'development' }, { token: owner.accessToken })).body
      .data;
    const hash = createHash('sha256').update(created.key).digest('hex');
    const one = await api.get(`${K}/${created.id}`, { token: owner.accessToken });
    expect(one.status).toBe(200);
    expect(one.body.data).toEqual(Object.fromEntries(Object.entries(created).filter(([k]) => k !== 'key')));
    const list = await api.get(`${K}?limit=100`, { token: owner.accessToken });
    expect(list.body.data.map((k: { id: string }) => k.id)).toContain(created.id);
    for (const text of [one.text, list.text]) {
      expect(text).not.toContain(created.key);
      expect(text).not.toContain(created.key.slice(12));
      expect(text).not.toContain(hash);
      expect(text).not.toMatch(/"(key|hash)"/);
    }
  });

  it('no file under the data directory contains the key; the SHA-256 is what is kept', async () => {
    const created = (await api.post(K, { name: 'on disk', type: 'integration', environment: 'production' }, { token: owner.accessToken }))
      .body.data;
    // Used once so that lastUsedAt is written too.
    expect((await api.get('/api/v1/tenant', { token: created.key })).status).toBe(200);
    const files = readdirSync(stack.dataDir, { recursive: true, withFileTypes: true })
      .filter((f) => f.isFile())
      .map((f) => join(f.parentPath, f.name));
    expect(files.some((f) => f.endsWith('identity.db'))).toBe(true);
    const disk = readAll(files);
    const secretPart = created.key.slice(created.start.length);
    expect(disk.includes(Buffer.from(secretPart))).toBe(false);
    expect(disk.includes(Buffer.from(created.key))).toBe(false);
    expect(disk.includes(Buffer.from(createHash('sha256').update(created.key).digest('hex')))).toBe(true);
  });

  it('records lastUsedAt once the key is used', async () => {
    const { key, id } = await createKey(api, owner.accessToken);
    expect((await api.get(`${K}/${id}`, { token: owner.accessToken })).body.data.lastUsedAt).toBeNull();
    expect((await api.get('/api/v1/tenant', { token: key })).status).toBe(200);
    await eventually(async () => (await api.get(`${K}/${id}`, { token: owner.accessToken })).body.data.lastUsedAt !== null);
  });
});

describe('who may manage keys', () => {
  it('an API key, even an unscoped owner key, gets 403 on every key route', async () => {
    const { key, id } = await createKey(api, owner.accessToken);
    const calls = [
      api.post(K, { name: 'x', type: 'sdk', environment: 'development' }, { token: key }),
      api.get(K, { token: key }),
      api.get(`${K}/${id}`, { token: key }),
      api.del(`${K}/${id}`, { token: key }),
    ];
    for (const res of await Promise.all(calls)) expect(expectError(res, 403, 'FORBIDDEN').details.reason).toBe('user_session_required');
    // Still alive: the refused DELETE did nothing.
    expect((await api.get(`${K}/${id}`, { token: owner.accessToken })).status).toBe(200);
  });

  it('a member (not owner or admin) gets 403', async () => {
    const email = `mem${Date.now()}@example.com`;
    expect(
      (
        await api.post(
          '/api/v1/tenant/team/members',
          { email, name: 'M', role: 'member', password: 'password123' },
          { token: owner.accessToken },
        )
      ).status,
    ).toBe(201);
    const member = (await api.post('/api/v1/auth/login', { email, password: 'password123' })).body.data.accessToken;
    const { id } = await createKey(api, owner.accessToken);
    for (const res of await Promise.all([
      api.post(K, { name: 'x', type: 'sdk', environment: 'development' }, { token: member }),
      api.get(K, { token: member }),
      api.get(`${K}/${id}`, { token: member }),
      api.del(`${K}/${id}`, { token: member }),
    ]))
      expect(expectError(res, 403, 'FORBIDDEN').details.reason).toBe('role_required');
  });

  it('the session cookie may manage keys (with our Origin on writes)', async () => {
    const origin = new URL(stack.url).origin;
    const res = await api.post(
      K,
      { name: 'from the page', type: 'sdk', environment: 'development' },
      { cookie: owner.cookie, headers: { origin } },
    );
    expect(res.status).toBe(201);
    expect((await api.get(K, { cookie: owner.cookie })).status).toBe(200);
    expectError(await api.del(`${K}/${res.body.data.id}`, { cookie: owner.cookie }), 403, 'FORBIDDEN');
    expect((await api.del(`${K}/${res.body.data.id}`, { cookie: owner.cookie, headers: { origin } })).status).toBe(200);
  });
});

describe('scopes', () => {
  it('a scoped key may do only what its scopes allow', async () => {
    const { key, id } = await createKey(api, owner.accessToken, { scopes: ['projects:read'] });
    expect((await api.get('/api/v1/auth/me', { token: key })).body.data.credential).toEqual({
      type: 'api_key',
      id,
      environment: 'development',
      scopes: ['projects:read'],
    });
    expect((await api.get('/api/v1/projects', { token: key })).status).toBe(200);
    expect((await api.get('/api/v1/tenant', { token: key })).status).toBe(200);
    const write = expectError(await api.post('/api/v1/projects', { name: 'nope' }, { token: key }), 403, 'FORBIDDEN');
    expect(write.details).toMatchObject({ reason: 'missing_scope', requiredScope: 'projects:write' });
    // Routes that need an unscoped credential: team, security, tenant settings.
    for (const path of ['/api/v1/tenant/team/members', '/api/v1/tenant/security/network', '/api/v1/tenant/settings/llm'])
      expect(expectError(await api.get(path, { token: key }), 403, 'FORBIDDEN').details.reason).toBe('unscoped_credential_required');
    // The list shows the scopes; duplicates are folded.
    const dup = (
      await api.post(
        K,
        { name: 'd', type: 'sdk', environment: 'development', scopes: ['projects:read', 'projects:read', 'agents:read'] },
        { token: owner.accessToken },
      )
    ).body.data;
    expect(dup.scopes).toEqual(['projects:read', 'agents:read']);
  });

  it('an empty scope list is a key limited to authentication-only routes', async () => {
    const res = await api.post(K, { name: 'none', type: 'sdk', environment: 'development', scopes: [] }, { token: owner.accessToken });
    expect(res.status).toBe(201);
    expect(res.body.data.scopes).toEqual([]);
    expect((await api.get('/api/v1/tenant', { token: res.body.data.key })).status).toBe(200);
    expectError(await api.get('/api/v1/projects', { token: res.body.data.key }), 403, 'FORBIDDEN');
  });
});

describe('revocation', () => {
  it('DELETE revokes: refused with 401 within one second, gone from GET and the list, a second DELETE is 404', async () => {
    const { key, id } = await createKey(api, owner.accessToken);
    // Warm the gateway's credential cache first: revocation must beat the cache.
    expect((await api.get('/api/v1/tenant', { token: key })).status).toBe(200);
    const del = await api.del(`${K}/${id}`, { token: owner.accessToken });
    expect(del.status).toBe(200);
    expect(del.body.data).toEqual({ id, revoked: true });
    const took = await eventually(async () => (await api.get('/api/v1/tenant', { token: key })).status === 401, 3000, 20);
    expect(took).toBeLessThan(1000);
    expectError(await api.get(`${K}/${id}`, { token: owner.accessToken }), 404, 'RESOURCE_NOT_FOUND');
    expect((await api.get(`${K}?limit=100`, { token: owner.accessToken })).body.data.map((k: { id: string }) => k.id)).not.toContain(id);
    expect(expectError(await api.del(`${K}/${id}`, { token: owner.accessToken }), 404, 'RESOURCE_NOT_FOUND').details).toEqual({
      resource: 'api_key',
      id,
    });
  });

  it('a request racing the revocation cannot put the key back in the cache', async () => {
    const { key, id } = await createKey(api, owner.accessToken);
    // Resolutions in flight while the key is revoked.
    const racing = Array.from({ length: 20 }, () => api.get('/api/v1/tenant', { token: key }));
    const del = api.del(`${K}/${id}`, { token: owner.accessToken });
    await Promise.all([...racing, del]);
    const took = await eventually(async () => (await api.get('/api/v1/tenant', { token: key })).status === 401, 3000, 20);
    expect(took).toBeLessThan(1000);
    // And it stays refused.
    for (let i = 0; i < 5; i++) expect((await api.get('/api/v1/tenant', { token: key })).status).toBe(401);
  });
});

describe('tenancy', () => {
  it("another tenant's key ids are 404 on GET and DELETE, and the key keeps working", async () => {
    const other = await signUp(api, 'Other');
    const theirs = await createKey(api, other.accessToken);
    for (const res of [
      await api.get(`${K}/${theirs.id}`, { token: owner.accessToken }),
      await api.del(`${K}/${theirs.id}`, { token: owner.accessToken }),
    ])
      expect(expectError(res, 404, 'RESOURCE_NOT_FOUND').details).toEqual({ resource: 'api_key', id: theirs.id });
    expect((await api.get(K, { token: owner.accessToken })).body.data.map((k: { id: string }) => k.id)).not.toContain(theirs.id);
    expect((await api.get('/api/v1/tenant', { token: theirs.key })).body.data.id).toBe(other.tenantId);
  });

  it('lists newest first with cursor pagination', async () => {
    const t = await signUp(api, 'Pager');
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await createKey(api, t.accessToken, { name: `k${i}` })).id);
    const first = await api.get(`${K}?limit=3`, { token: t.accessToken });
    expect(first.body.meta.pagination).toMatchObject({ limit: 3, has_more: true });
    const second = await api.get(`${K}?limit=3&cursor=${encodeURIComponent(first.body.meta.pagination.next_cursor)}`, {
      token: t.accessToken,
    });
    expect(second.body.meta.pagination).toMatchObject({ has_more: false, next_cursor: null });
    expect([...first.body.data, ...second.body.data].map((k: { id: string }) => k.id)).toEqual(ids.reverse());
  });
});
