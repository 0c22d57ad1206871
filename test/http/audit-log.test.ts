import { createHash, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { startIdentity } from '@svc/identity';
import { startGateway, type RunningGateway } from '@svc/gateway';
import type { RunningService } from '@svc/kit';
import { client, createKey, eventually, expectError, signUp, type Account, type Client, type Res } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// The audit log (CONTRACT.md 10) through the real stack: every audited action done over HTTP, the hash chain and its
// verification, tampering in the store, tenancy, and one chain while two identity replicas behind two gateways
// record at once.
const ADMIN_TOKEN = `adm_${randomBytes(16).toString('hex')}`;
const UA = 'audit-test/1.0 (+jest)';
const A = '/api/v1/audit-log';

let stack: Stack;
let api: Client;

beforeAll(async () => {
  stack = await startStack({ env: { SVC_ADMIN_TOKEN: ADMIN_TOKEN } });
  api = client(stack.url);
});
afterAll(() => stack.stop());

let rid = 0;
/** A request id of our own, sent as X-Request-Id: the entry must carry it. */
const nextId = () => `audit-${Date.now()}-${++rid}`;
const h = (requestId: string) => ({ 'user-agent': UA, 'x-request-id': requestId });

async function entries(t: Pick<Account, 'accessToken'>, query = ''): Promise<any[]> {
  const res = await api.get(`${A}${query}`, { token: t.accessToken });
  expect(res.status).toBe(200);
  return res.body.data;
}

/** Every entry of the tenant, oldest first, following cursors. */
async function allEntries(token: string, query = ''): Promise<{ items: any[]; raw: string }> {
  const items: any[] = [];
  let raw = '';
  let cursor: string | null = null;
  do {
    const sep = query ? '&' : '?';
    const res: Res = await api.get(`${A}${query}${cursor ? `${sep}cursor=${encodeURIComponent(cursor)}` : ''}`, { token });
    expect(res.status).toBe(200);
    raw += res.text;
    items.push(...res.body.data);
    cursor = res.body.meta.pagination.next_cursor;
    if (!query) query = '?limit=100';
  } while (cursor);
  return { items: items.reverse(), raw };
}

/** Waits (at most 1 s) for exactly one entry of this action and request id, and returns it. */
async function entryOf(t: Account, action: string, requestId: string | null): Promise<any> {
  let found: any[] = [];
  await eventually(
    async () => {
      found = (await entries(t, `?action=${action}&limit=100`)).filter((e) => requestId === null || e.requestId === requestId);
      return found.length > 0;
    },
    1000,
    20,
  );
  expect(found).toHaveLength(1);
  return found[0];
}

function expectMeta(e: any, requestId: string) {
  expect(e.ip).toMatch(/^(::ffff:)?127\.0\.0\.1$/);
  expect(e.userAgent).toBe(UA);
  expect(e.requestId).toBe(requestId);
  expect(e.hash).toMatch(/^[0-9a-f]{64}$/);
}

const userActor = (t: Account) => ({ type: 'user', id: t.userId, email: t.email });

function canonical(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  const o = v as Record<string, unknown>;
  return `{${Object.keys(o)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonical(o[k])}`)
    .join(',')}}`;
}

describe('every audited action', () => {
  let owner: Account;
  const secrets: string[] = [];

  beforeAll(async () => {
    owner = await signUp(api, 'Audited');
  });

  it('api keys: created, limits changed, rotated, revoked; never the key', async () => {
    let r = nextId();
    const created = await api.post(
      '/api/v1/api-keys',
      { name: 'ci', type: 'ci', environment: 'production', scopes: ['projects:read'] },
      { token: owner.accessToken, headers: h(r) },
    );
    expect(created.status).toBe(201);
    const keyId = created.body.data.id;
    secrets.push(created.body.data.key);
    const e1 = await entryOf(owner, 'api_key.created', r);
    expectMeta(e1, r);
    expect(e1).toMatchObject({ actor: userActor(owner), target: { type: 'api_key', id: keyId }, prevHash: null });
    expect(e1.changes).toEqual({ before: null, after: expect.objectContaining({ name: 'ci', type: 'ci', scopes: ['projects:read'] }) });

    r = nextId();
    expect(
      (await api.patch(`/api/v1/api-keys/${keyId}`, { limits: { requestsPerMinute: 7 } }, { token: owner.accessToken, headers: h(r) }))
        .status,
    ).toBe(200);
    const e2 = await entryOf(owner, 'api_key.limits_changed', r);
    expectMeta(e2, r);
    expect(e2.changes).toEqual({ before: { limits: {} }, after: { limits: { requestsPerMinute: 7 } } });
    expect(e2.target).toEqual({ type: 'api_key', id: keyId });

    r = nextId();
    const rotated = await api.post(
      `/api/v1/api-keys/${keyId}/rotate`,
      { gracePeriodSeconds: 60 },
      { token: owner.accessToken, headers: h(r) },
    );
    expect(rotated.status).toBe(201);
    secrets.push(rotated.body.data.key);
    const e3 = await entryOf(owner, 'api_key.rotated', r);
    expectMeta(e3, r);
    expect(e3.changes.before.start).toBe(created.body.data.key.slice(0, 12));
    expect(e3.changes.after.start).toBe(rotated.body.data.key.slice(0, 12));

    r = nextId();
    expect((await api.del(`/api/v1/api-keys/${keyId}`, { token: owner.accessToken, headers: h(r) })).status).toBe(200);
    const e4 = await entryOf(owner, 'api_key.revoked', r);
    expectMeta(e4, r);
    expect(e4).toMatchObject({ actor: userActor(owner), target: { type: 'api_key', id: keyId } });
  });

  it('members: added, role changed, removed; never the password', async () => {
    const password = `pw-${randomBytes(12).toString('hex')}`;
    secrets.push(password);
    const email = `member${Date.now()}@example.com`;
    let r = nextId();
    const added = await api.post(
      '/api/v1/tenant/team/members',
      { email, name: 'Mem', role: 'member', password },
      { token: owner.accessToken, headers: h(r) },
    );
    expect(added.status).toBe(201);
    const userId = added.body.data.userId;
    const e1 = await entryOf(owner, 'member.added', r);
    expectMeta(e1, r);
    expect(e1).toMatchObject({ actor: userActor(owner), target: { type: 'user', id: userId } });
    expect(e1.changes).toEqual({ before: null, after: { email, name: 'Mem', role: 'member' } });

    r = nextId();
    expect(
      (await api.patch(`/api/v1/tenant/team/members/${userId}`, { role: 'admin' }, { token: owner.accessToken, headers: h(r) })).status,
    ).toBe(200);
    const e2 = await entryOf(owner, 'member.role_changed', r);
    expectMeta(e2, r);
    expect(e2.changes).toEqual({ before: { role: 'member' }, after: { role: 'admin' } });

    r = nextId();
    expect((await api.del(`/api/v1/tenant/team/members/${userId}`, { token: owner.accessToken, headers: h(r) })).status).toBe(200);
    const e3 = await entryOf(owner, 'member.removed', r);
    expectMeta(e3, r);
    expect(e3).toMatchObject({ target: { type: 'user', id: userId }, changes: { before: { role: 'admin', email }, after: null } });
  });

  it('network allowlist changed', async () => {
    const r = nextId();
    expect(
      (await api.put('/api/v1/tenant/security/network', { ipAllowlist: ['10.0.0.0/8'] }, { token: owner.accessToken, headers: h(r) }))
        .status,
    ).toBe(200);
    const e = await entryOf(owner, 'network.allowlist_changed', r);
    expectMeta(e, r);
    expect(e).toMatchObject({ actor: userActor(owner), target: { type: 'tenant', id: owner.tenantId } });
    expect(e.changes).toEqual({ before: { ipAllowlist: [] }, after: { ipAllowlist: ['10.0.0.0/8'] } });
    await api.put('/api/v1/tenant/security/network', { ipAllowlist: [] }, { token: owner.accessToken });
  });

  it('secrets: created, versioned, deleted, by a key (its prefix shown); never the value', async () => {
    const { key, id: keyId } = await createKey(api, owner.accessToken, { scopes: ['secrets:write', 'secrets:read'] });
    secrets.push(key);
    const v1 = `value-one-${randomBytes(8).toString('hex')}`;
    const v2 = `value-two-${randomBytes(8).toString('hex')}`;
    secrets.push(v1, v2);
    let r = nextId();
    const created = await api.post('/api/v1/secrets', { name: 'DB_PASSWORD', value: v1 }, { token: key, headers: h(r) });
    expect(created.status).toBe(201);
    const e1 = await entryOf(owner, 'secret.created', r);
    expectMeta(e1, r);
    expect(e1.actor).toEqual({ type: 'api_key', id: keyId, keyPrefix: key.slice(0, 12) });
    // The secret's name, as the API shows it (GET /secrets/:name), not an internal id no response carries.
    expect(e1.target).toEqual({ type: 'secret', id: 'DB_PASSWORD' });
    expect(e1.changes.after).toMatchObject({ name: 'DB_PASSWORD', version: 1 });

    r = nextId();
    expect((await api.put('/api/v1/secrets/DB_PASSWORD', { value: v2 }, { token: key, headers: h(r) })).status).toBe(200);
    const e2 = await entryOf(owner, 'secret.versioned', r);
    expectMeta(e2, r);
    expect(e2.changes).toEqual({ before: { name: 'DB_PASSWORD', version: 1 }, after: { name: 'DB_PASSWORD', version: 2 } });

    r = nextId();
    expect((await api.del('/api/v1/secrets/DB_PASSWORD', { token: key, headers: h(r) })).status).toBe(200);
    const e3 = await entryOf(owner, 'secret.deleted', r);
    expectMeta(e3, r);
    expect(e3.target).toEqual(e1.target);
  });

  it('LLM settings changed; never the key', async () => {
    const llmKey = `sk-${randomBytes(16).toString('hex')}`;
    secrets.push(llmKey);
    const r = nextId();
    const res = await api.patch(
      '/api/v1/tenant/settings/llm',
      { provider: 'openai', model: 'gpt-4o-mini', apiKey: llmKey },
      { token: owner.accessToken, headers: h(r) },
    );
    expect(res.status).toBe(200);
    const e = await entryOf(owner, 'llm_settings.changed', r);
    expectMeta(e, r);
    expect(e.changes.after).toMatchObject({ provider: 'openai', model: 'gpt-4o-mini', hasApiKey: true });
  });

  it('sessions: signed in, signed out, refresh reuse detected, and failed sign-ins as one entry per burst of 5', async () => {
    let r = nextId();
    const login = await api.post('/api/v1/auth/login', { email: owner.email, password: owner.password }, { headers: h(r) });
    expect(login.status).toBe(200);
    secrets.push(login.body.data.accessToken, login.body.data.refreshToken);
    const e1 = await entryOf(owner, 'session.signed_in', r);
    expectMeta(e1, r);
    expect(e1.actor).toEqual(userActor(owner));
    expect(e1.target.type).toBe('session');

    // A refresh token used twice: the second use is reuse, and the session ends.
    const first = await api.post('/api/v1/auth/refresh', { refreshToken: login.body.data.refreshToken });
    expect(first.status).toBe(200);
    r = nextId();
    expectError(
      await api.post('/api/v1/auth/refresh', { refreshToken: login.body.data.refreshToken }, { headers: h(r) }),
      401,
      'UNAUTHORIZED',
    );
    const e2 = await entryOf(owner, 'session.refresh_reuse_detected', r);
    expectMeta(e2, r);
    expect(e2.actor).toEqual({ type: 'system', id: 'identity' });
    expect(e2.target).toEqual(e1.target);

    const again = await api.post('/api/v1/auth/login', { email: owner.email, password: owner.password });
    r = nextId();
    expect((await api.post('/api/v1/auth/logout', undefined, { token: again.body.data.accessToken, headers: h(r) })).status).toBeLessThan(
      300,
    );
    const e3 = await entryOf(owner, 'session.signed_out', r);
    expectMeta(e3, r);
    expect(e3.actor).toEqual(userActor(owner));

    const wrong = `wrong-${randomBytes(6).toString('hex')}`;
    secrets.push(wrong);
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) {
      ids.push(nextId());
      expectError(
        await api.post('/api/v1/auth/login', { email: owner.email, password: wrong }, { headers: h(ids[i]) }),
        401,
        'UNAUTHORIZED',
      );
    }
    // The fifth failure completes a burst; the sixth starts the next one.
    const e4 = await entryOf(owner, 'session.sign_in_failed', ids[4]);
    expectMeta(e4, ids[4]);
    expect(e4.changes).toEqual({ before: null, after: { failures: 5 } });
    expect(await entries(owner, '?action=session.sign_in_failed')).toHaveLength(1);
    // A success resets the count.
    expect((await api.post('/api/v1/auth/login', { email: owner.email, password: owner.password })).status).toBe(200);
  });

  it('CLI logins approved and denied', async () => {
    for (const [verb, action] of [
      ['complete', 'cli_login.approved'],
      ['deny', 'cli_login.denied'],
    ] as const) {
      const state = randomBytes(32).toString('hex');
      const codeChallenge = createHash('sha256').update(randomBytes(32).toString('base64url')).digest('base64url');
      const started = await api.post('/api/v1/cli/auth/start', {
        state,
        codeChallenge,
        codeChallengeMethod: 'S256',
        cliVersion: '1.0.0',
        platform: 'linux-x64',
      });
      expect(started.status).toBe(201);
      const r = nextId();
      expect(
        (
          await api.post(
            `/api/v1/cli/auth/${verb}`,
            { loginId: started.body.data.loginId, state },
            { token: owner.accessToken, headers: h(r) },
          )
        ).status,
      ).toBe(200);
      const e = await entryOf(owner, action, r);
      expectMeta(e, r);
      expect(e).toMatchObject({ actor: userActor(owner), target: { type: 'cli_login', id: started.body.data.loginId } });
    }
  });

  it('operator actions: plan changed and credits adjusted, by the admin actor', async () => {
    const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
    let r = nextId();
    expect(
      (await api.patch(`/api/v1/admin/tenants/${owner.tenantId}`, { plan: 'growth' }, { headers: { ...admin, ...h(r) } })).status,
    ).toBe(200);
    const e1 = await entryOf(owner, 'admin.plan_changed', r);
    expectMeta(e1, r);
    expect(e1).toMatchObject({ actor: { type: 'admin', id: 'operator' }, target: { type: 'tenant', id: owner.tenantId } });
    expect(e1.changes).toEqual({ before: { plan: 'free' }, after: { plan: 'growth' } });

    r = nextId();
    expect(
      (
        await api.post(
          `/api/v1/admin/tenants/${owner.tenantId}/credits`,
          { delta: 250, reason: 'goodwill' },
          { headers: { ...admin, ...h(r) } },
        )
      ).status,
    ).toBe(200);
    const e2 = await entryOf(owner, 'admin.credits_adjusted', r);
    expectMeta(e2, r);
    expect(e2.actor).toEqual({ type: 'admin', id: 'operator' });
    expect(e2.changes.after).toMatchObject({ delta: 250, reason: 'goodwill' });
    expect(e2.changes.after.balance - e2.changes.before.balance).toBe(250);
    expect(JSON.stringify(e2)).not.toContain(ADMIN_TOKEN);
  });

  it('the whole log: one entry per action, no secret anywhere in the raw answer, a chain that verifies', async () => {
    const { items, raw } = await allEntries(owner.accessToken);
    for (const s of [...secrets, owner.password, owner.accessToken, owner.refreshToken, owner.cookie.split('=')[1], ADMIN_TOKEN])
      expect(raw).not.toContain(s);
    expect(raw).not.toMatch(/svc_(sdk|cli|ci|int|mkt)_[0-9A-Za-z]{20,}/);
    expect(raw).not.toMatch(/svc_(rt|sess)_/);
    const count = (action: string) => items.filter((e) => e.action === action).length;
    for (const action of [
      'api_key.created',
      'api_key.rotated',
      'api_key.revoked',
      'api_key.limits_changed',
      'member.added',
      'member.removed',
      'member.role_changed',
      'network.allowlist_changed',
      'secret.created',
      'secret.versioned',
      'secret.deleted',
      'llm_settings.changed',
      'session.signed_out',
      'session.refresh_reuse_detected',
      'session.sign_in_failed',
      'cli_login.approved',
      'cli_login.denied',
      'admin.plan_changed',
      'admin.credits_adjusted',
    ])
      expect([action, count(action)]).toEqual([action, action === 'network.allowlist_changed' ? 2 : action === 'api_key.created' ? 2 : 1]);
    expect(count('session.signed_in')).toBe(3);
    // The chain: oldest first, each prevHash is the previous hash, each hash the SHA-256 of the canonical JSON.
    expect(items[0].prevHash).toBeNull();
    items.forEach((e, i) => {
      const { hash, ...rest } = e;
      expect(createHash('sha256').update(canonical(rest)).digest('hex')).toBe(hash);
      if (i > 0) expect(e.prevHash).toBe(items[i - 1].hash);
    });
    const v = await api.get(`${A}/verify`, { token: owner.accessToken });
    expect(v.body.data).toEqual({ valid: true, entries: items.length, firstBrokenId: null });
  });
});

describe('reading', () => {
  let owner: Account;
  let memberToken: string;

  beforeAll(async () => {
    owner = await signUp(api, 'Reader');
    const m = { email: `m${Date.now()}@example.com`, name: 'M', role: 'member', password: 'member password 1' };
    expect((await api.post('/api/v1/tenant/team/members', m, { token: owner.accessToken })).status).toBe(201);
    memberToken = (await api.post('/api/v1/auth/login', { email: m.email, password: m.password })).body.data.accessToken;
    for (let i = 0; i < 7; i++) await api.post('/api/v1/secrets', { name: `S${i}`, value: 'v' }, { token: owner.accessToken });
  });

  it('filters by action and actor, pages newest first with a cursor, and by time', async () => {
    const all = (await allEntries(owner.accessToken)).items;
    expect(all.map((e) => e.action)).toEqual(['member.added', 'session.signed_in', ...Array(7).fill('secret.created')]);
    const p1 = await api.get(`${A}?action=secret.created&limit=3`, { token: owner.accessToken });
    expect(p1.body.data).toHaveLength(3);
    expect(p1.body.meta.pagination).toMatchObject({ limit: 3, has_more: true });
    const p2 = await api.get(`${A}?action=secret.created&limit=3&cursor=${p1.body.meta.pagination.next_cursor}`, {
      token: owner.accessToken,
    });
    const p3 = await api.get(`${A}?action=secret.created&limit=3&cursor=${p2.body.meta.pagination.next_cursor}`, {
      token: owner.accessToken,
    });
    const paged = [...p1.body.data, ...p2.body.data, ...p3.body.data].map((e) => e.id);
    expect(paged).toEqual(
      all
        .slice(2)
        .reverse()
        .map((e) => e.id),
    );
    expect(p3.body.meta.pagination.has_more).toBe(false);

    const byMember = await entries(owner, `?actor=${all[1].actor.id}`);
    expect(byMember.map((e) => e.action)).toEqual(['session.signed_in']);
    expect(await entries(owner, '?actor=usr_nobody')).toEqual([]);

    // after / before are exclusive times.
    const mid = all[4].at;
    const after = await entries(owner, `?after=${encodeURIComponent(mid)}&limit=100`);
    expect(after.every((e) => e.at > mid)).toBe(true);
    expect(after.length).toBe(all.filter((e) => e.at > mid).length);
    const before = await entries(owner, `?before=${encodeURIComponent(mid)}&limit=100`);
    expect(before.map((e) => e.id)).toEqual(
      all
        .filter((e) => e.at < mid)
        .reverse()
        .map((e) => e.id),
    );

    for (const q of ['?after=yesterday', '?limit=0', '?limit=101', '?action=nope.nope', '?extra=1', '?cursor=%%%'])
      expect((await api.get(`${A}${q}`, { token: owner.accessToken })).status).toBe(400);
  });

  it('a member gets 403; a key needs audit:read (an owner key with it reads); another tenant sees nothing', async () => {
    expectError(await api.get(A, { token: memberToken }), 403, 'FORBIDDEN');
    expectError(await api.get(`${A}/verify`, { token: memberToken }), 403, 'FORBIDDEN');
    const limited = await createKey(api, owner.accessToken, { scopes: ['projects:read'] });
    expectError(await api.get(A, { token: limited.key }), 403, 'FORBIDDEN');
    const reader = await createKey(api, owner.accessToken, { scopes: ['audit:read'] });
    const read = await api.get(A, { token: reader.key });
    expect(read.status).toBe(200);
    expect(read.body.data.length).toBeGreaterThan(0);

    const other = await signUp(api, 'Other');
    const theirs = (await allEntries(other.accessToken)).items;
    expect(theirs).toEqual([]);
    const ours = (await allEntries(owner.accessToken)).items;
    expect((await entries(other, `?actor=${owner.userId}`)).length).toBe(0);
    expect(JSON.stringify(theirs)).not.toContain(ours[0].id);
  });

  it('has no write route: POST, PUT, PATCH and DELETE answer 405', async () => {
    for (const method of ['POST', 'PUT', 'PATCH', 'DELETE']) {
      for (const path of [A, `${A}/verify`]) {
        const res = await api.request(method, path, { token: owner.accessToken, body: method === 'DELETE' ? undefined : {} });
        expectError(res, 405, 'METHOD_NOT_ALLOWED');
      }
    }
  });
});

describe('the chain', () => {
  it('reports the first tampered entry when a stored entry is changed in the SQLite file', async () => {
    const t = await signUp(api, 'Tamper');
    for (let i = 0; i < 4; i++) await api.post('/api/v1/secrets', { name: `T${i}`, value: 'v' }, { token: t.accessToken });
    const items = (await allEntries(t.accessToken)).items;
    expect(items).toHaveLength(4);
    expect((await api.get(`${A}/verify`, { token: t.accessToken })).body.data).toEqual({ valid: true, entries: 4, firstBrokenId: null });

    const db = new Database(join(stack.dataDir, 'identity.db'));
    try {
      const row = db.prepare('SELECT doc FROM audit_log WHERE id = ?').get(items[1].id) as { doc: string };
      const doc = JSON.parse(row.doc);
      doc.changes.after.name = 'FORGED';
      db.prepare('UPDATE audit_log SET doc = ? WHERE id = ?').run(JSON.stringify(doc), items[1].id);
    } finally {
      db.close();
    }
    expect((await api.get(`${A}/verify`, { token: t.accessToken })).body.data).toEqual({
      valid: false,
      entries: 4,
      firstBrokenId: items[1].id,
    });
    // Another tenant's chain is untouched.
    const other = await signUp(api, 'Untouched');
    await api.post('/api/v1/secrets', { name: 'X', value: 'v' }, { token: other.accessToken });
    expect((await api.get(`${A}/verify`, { token: other.accessToken })).body.data).toEqual({
      valid: true,
      entries: 1,
      firstBrokenId: null,
    });
  });

  it('stays one unbroken chain while two identity replicas behind two gateways record at once', async () => {
    // A second identity replica on the same store, and a gateway that calls only it.
    const identity2: RunningService = await startIdentity({ ...stack.env, IDENTITY_PORT: '0' });
    let gw2: RunningGateway | null = null;
    try {
      gw2 = await startGateway({ ...stack.env, PORT: '0', IDENTITY_ADDR: `127.0.0.1:${identity2.port}`, INSTANCE_ID: 'gw-audit-2' });
      const api2 = client(gw2.url);
      const t = await signUp(api, 'Concurrent');
      const N = 20;
      const results = await Promise.all(
        Array.from({ length: N }, (_, i) =>
          (i % 2 ? api2 : api).post('/api/v1/secrets', { name: `C${i}`, value: 'v' }, { token: t.accessToken }),
        ),
      );
      expect(results.map((r) => r.status)).toEqual(Array(N).fill(201));
      const items = (await allEntries(t.accessToken)).items;
      expect(items).toHaveLength(N);
      expect(new Set(items.map((e) => e.target.id)).size).toBe(N);
      expect(items[0].prevHash).toBeNull();
      for (let i = 1; i < N; i++) expect(items[i].prevHash).toBe(items[i - 1].hash);
      for (const g of [api, api2])
        expect((await g.get(`${A}/verify`, { token: t.accessToken })).body.data).toEqual({ valid: true, entries: N, firstBrokenId: null });
    } finally {
      await gw2?.stop();
      await identity2.stop();
    }
  });
});
