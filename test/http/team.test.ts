import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// Team members: list, add, change role, remove; who may do it; owner rules; tenancy.
let stack: Stack;
let api: Client;
let owner: Account;

beforeAll(async () => {
  stack = await startStack();
  api = client(stack.url);
  owner = await signUp(api, 'Team');
});
afterAll(() => stack.stop());

const M = '/api/v1/tenant/team/members';
let n = 0;
const newMember = (role = 'member') => ({ email: `m${Date.now()}${++n}@example.com`, name: `Member ${n}`, role, password: 'password123' });

async function add(token: string, role = 'member') {
  const body = newMember(role);
  const res = await api.post(M, body, { token });
  expect(res.status).toBe(201);
  const login = await api.post('/api/v1/auth/login', { email: body.email, password: body.password });
  expect(login.status).toBe(200);
  return { ...body, userId: res.body.data.userId as string, token: login.body.data.accessToken as string };
}

describe('list and add', () => {
  it('lists the owner, and adds a member (201) who can sign in with the given password', async () => {
    const t = await signUp(api, 'Fresh');
    const list = await api.get(M, { token: t.accessToken });
    expect(list.status).toBe(200);
    expect(list.body.data).toEqual([
      { userId: t.userId, email: t.email, name: 'Fresh owner', role: 'owner', joinedAt: expect.stringMatching(/Z$/) },
    ]);
    expect(list.body.meta.pagination).toEqual({ limit: 20, next_cursor: null, has_more: false });

    const body = newMember('admin');
    const res = await api.post(M, { ...body, email: body.email.toUpperCase() }, { token: t.accessToken });
    expect(res.status).toBe(201);
    expect(res.body.data).toEqual({
      userId: expect.stringMatching(/^usr_/),
      email: body.email,
      name: body.name,
      role: 'admin',
      joinedAt: expect.stringMatching(/Z$/),
    });
    const login = await api.post('/api/v1/auth/login', { email: body.email, password: body.password });
    expect(login.status).toBe(200);
    expect(login.body.data).toMatchObject({ user: { id: res.body.data.userId, role: 'admin' }, tenant: { id: t.tenantId } });
    // Newest first.
    expect((await api.get(M, { token: t.accessToken })).body.data.map((m: { userId: string }) => m.userId)).toEqual([
      res.body.data.userId,
      t.userId,
    ]);
  });

  it('a member may list the team', async () => {
    const m = await add(owner.accessToken);
    const res = await api.get(M, { token: m.token });
    expect(res.status).toBe(200);
    expect(res.body.data.map((x: { userId: string }) => x.userId)).toEqual(expect.arrayContaining([owner.userId, m.userId]));
  });

  it('409 for an email already used, in this tenant or any other', async () => {
    const other = await signUp(api, 'Taken');
    for (const email of [owner.email, other.email]) {
      expectError(await api.post(M, { ...newMember(), email }, { token: owner.accessToken }), 409, 'CONFLICT');
    }
  });

  it('400 for a bad email, role, short password or unknown field, naming the fields', async () => {
    const count = (await api.get(`${M}?limit=100`, { token: owner.accessToken })).body.data.length;
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ email: 'nope' }, 'email'],
      [{ role: 'superuser' }, 'role'],
      [{ role: 'Owner' }, 'role'],
      [{ password: 'short' }, 'password'],
      [{ tenantId: 'ten_x' }, 'tenantId'],
      [{ name: '' }, 'name'],
    ];
    for (const [patch, field] of cases) {
      const err = expectError(await api.post(M, { ...newMember(), ...patch }, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
      expect(err.details.fields.map((f: { field: string }) => f.field)).toContain(field);
    }
    expect((await api.get(`${M}?limit=100`, { token: owner.accessToken })).body.data.length).toBe(count);
  });
});

describe('changing roles', () => {
  it('promotes a member to admin: their old token is refused within one second, a new sign-in carries the new role', async () => {
    const m = await add(owner.accessToken);
    expectError(await api.post(M, newMember(), { token: m.token }), 403, 'FORBIDDEN');
    const res = await api.patch(`${M}/${m.userId}`, { role: 'admin' }, { token: owner.accessToken });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ userId: m.userId, role: 'admin', email: m.email });
    // Signed in again right away (often within the same second as the change): the new token must work.
    const again = await api.post('/api/v1/auth/login', { email: m.email, password: m.password });
    expect(again.body.data.user.role).toBe('admin');
    const fresh = again.body.data.accessToken;
    expect((await api.get('/api/v1/auth/me', { token: fresh })).body.data.role).toBe('admin');
    expect((await api.post(M, newMember(), { token: fresh })).status).toBe(201);
    // The token issued before the change carried the old role: refused.
    const took = await eventually(async () => (await api.get('/api/v1/auth/me', { token: m.token })).status === 401, 3000, 20);
    expect(took).toBeLessThan(1000);
    // Once every gateway knows of the change, the token issued after it still works.
    expect((await api.get('/api/v1/auth/me', { token: fresh })).status).toBe(200);
  });

  it('a refresh after a role change yields a token with the new role', async () => {
    const body = newMember();
    await api.post(M, body, { token: owner.accessToken });
    const login = (await api.post('/api/v1/auth/login', { email: body.email, password: body.password })).body.data;
    await api.patch(`${M}/${login.user.id}`, { role: 'admin' }, { token: owner.accessToken });
    const refreshed = await api.post('/api/v1/auth/refresh', { refreshToken: login.refreshToken });
    expect(refreshed.status).toBe(200);
    expect(refreshed.body.data.user.role).toBe('admin');
    await eventually(async () => (await api.get('/api/v1/auth/me', { token: login.accessToken })).status === 401, 3000, 20);
    expect((await api.get('/api/v1/auth/me', { token: refreshed.body.data.accessToken })).body.data.role).toBe('admin');
  });

  it('API keys follow their creator’s role', async () => {
    const admin = await add(owner.accessToken, 'admin');
    const { key } = await createKey(api, admin.token);
    expect((await api.get('/api/v1/tenant/security/network', { token: key })).status).toBe(200);
    await api.patch(`${M}/${admin.userId}`, { role: 'member' }, { token: owner.accessToken });
    const took = await eventually(async () => (await api.get('/api/v1/tenant/security/network', { token: key })).status === 403, 3000, 20);
    expect(took).toBeLessThan(1000);
    expect((await api.get('/api/v1/tenant', { token: key })).status).toBe(200);
  });

  it('only an owner grants or takes away ownership; the last owner stays', async () => {
    const admin = await add(owner.accessToken, 'admin');
    const m = await add(owner.accessToken);
    expect(
      expectError(await api.patch(`${M}/${m.userId}`, { role: 'owner' }, { token: admin.token }), 403, 'FORBIDDEN').details.reason,
    ).toBe('owner_required');
    expect(
      expectError(await api.patch(`${M}/${owner.userId}`, { role: 'member' }, { token: admin.token }), 403, 'FORBIDDEN').details.reason,
    ).toBe('owner_required');
    expectError(await api.post(M, newMember('owner'), { token: admin.token }), 403, 'FORBIDDEN');
    expect(
      expectError(await api.patch(`${M}/${owner.userId}`, { role: 'admin' }, { token: owner.accessToken }), 409, 'CONFLICT').details.reason,
    ).toBe('last_owner');
    // An admin manages members and admins.
    expect((await api.patch(`${M}/${m.userId}`, { role: 'admin' }, { token: admin.token })).status).toBe(200);
    expectError(await api.patch(`${M}/${m.userId}`, { role: 'boss' }, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
    expectError(await api.patch(`${M}/${m.userId}`, {}, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
  });

  it('two owners demoting (or removing) each other at once leave one owner, whichever wins', async () => {
    for (const change of ['demote', 'remove'] as const) {
      const first = await signUp(api, `Two owners ${change}`);
      const second = await add(first.accessToken, 'owner');
      const act = (token: string, target: string) =>
        change === 'demote' ? api.patch(`${M}/${target}`, { role: 'member' }, { token }) : api.del(`${M}/${target}`, { token });
      const answers = await Promise.all([act(first.accessToken, second.userId), act(second.token, first.userId)]);
      // The loser is refused: 409 when its change lost inside identity, 401 when the winner's change had already
      // revoked its token at the gateway (revocations reach gateways at once through the watch stream).
      const [won, lost] = answers.map((a) => a.status).sort();
      expect(won).toBe(200);
      expect([401, 409]).toContain(lost);
      const relogin = await api.post('/api/v1/auth/login', { email: first.email, password: first.password });
      const token = relogin.status === 200 ? relogin.body.data.accessToken : second.token;
      const members = (await api.get(M, { token })).body.data as Array<{ role: string }>;
      expect(members.filter((x) => x.role === 'owner')).toHaveLength(1);
    }
  });
});

describe('removing members', () => {
  it('removes a member: their token is refused within one second, they cannot sign in, a second DELETE is 404', async () => {
    const m = await add(owner.accessToken);
    const res = await api.del(`${M}/${m.userId}`, { token: owner.accessToken });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ userId: m.userId, removed: true });
    const took = await eventually(async () => (await api.get('/api/v1/tenant', { token: m.token })).status === 401, 3000, 20);
    expect(took).toBeLessThan(1000);
    expectError(await api.post('/api/v1/auth/login', { email: m.email, password: m.password }), 401, 'UNAUTHORIZED');
    expect(
      (await api.get(`${M}?limit=100`, { token: owner.accessToken })).body.data.map((x: { userId: string }) => x.userId),
    ).not.toContain(m.userId);
    expect(expectError(await api.del(`${M}/${m.userId}`, { token: owner.accessToken }), 404, 'RESOURCE_NOT_FOUND').details).toEqual({
      resource: 'member',
      id: m.userId,
    });
  });

  it('the keys a removed member created stop working', async () => {
    const admin = await add(owner.accessToken, 'admin');
    const { key } = await createKey(api, admin.token);
    expect((await api.get('/api/v1/tenant', { token: key })).status).toBe(200);
    await api.del(`${M}/${admin.userId}`, { token: owner.accessToken });
    const took = await eventually(async () => (await api.get('/api/v1/tenant', { token: key })).status === 401, 3000, 20);
    expect(took).toBeLessThan(1000);
  });

  it('nobody removes themselves, and an admin cannot remove an owner', async () => {
    const admin = await add(owner.accessToken, 'admin');
    expect(expectError(await api.del(`${M}/${owner.userId}`, { token: owner.accessToken }), 409, 'CONFLICT').details.reason).toBe(
      'self_removal',
    );
    expect(expectError(await api.del(`${M}/${owner.userId}`, { token: admin.token }), 403, 'FORBIDDEN').details.reason).toBe(
      'owner_required',
    );
  });
});

describe('access', () => {
  it('a member gets 403 role_required on every change', async () => {
    const m = await add(owner.accessToken);
    const target = await add(owner.accessToken);
    for (const res of [
      await api.post(M, newMember(), { token: m.token }),
      await api.patch(`${M}/${target.userId}`, { role: 'admin' }, { token: m.token }),
      await api.del(`${M}/${target.userId}`, { token: m.token }),
    ])
      expect(expectError(res, 403, 'FORBIDDEN').details.reason).toBe('role_required');
    expect(
      (await api.get(`${M}?limit=100`, { token: owner.accessToken })).body.data.find((x: { userId: string }) => x.userId === target.userId)
        .role,
    ).toBe('member');
  });

  it('an unscoped key of an owner manages the team; a scoped key gets 403', async () => {
    const unscoped = await createKey(api, owner.accessToken);
    expect((await api.post(M, newMember(), { token: unscoped.key })).status).toBe(201);
    const scoped = await createKey(api, owner.accessToken, { scopes: ['projects:read', 'projects:write'] });
    for (const res of [await api.get(M, { token: scoped.key }), await api.post(M, newMember(), { token: scoped.key })])
      expect(expectError(res, 403, 'FORBIDDEN').details.reason).toBe('unscoped_credential_required');
  });

  it("another tenant's members are 404 on PATCH and DELETE, never 403, and stay untouched", async () => {
    const other = await signUp(api, 'Neighbour');
    const theirs = (await api.post(M, newMember(), { token: other.accessToken })).body.data.userId;
    for (const id of [theirs, other.userId]) {
      for (const res of [
        await api.patch(`${M}/${id}`, { role: 'admin' }, { token: owner.accessToken }),
        await api.del(`${M}/${id}`, { token: owner.accessToken }),
      ])
        expect(expectError(res, 404, 'RESOURCE_NOT_FOUND').details).toEqual({ resource: 'member', id });
    }
    const theirList = (await api.get(M, { token: other.accessToken })).body.data;
    expect(theirList.map((x: { userId: string; role: string }) => [x.userId, x.role]).sort()).toEqual(
      [
        [other.userId, 'owner'],
        [theirs, 'member'],
      ].sort(),
    );
    expect(
      (await api.get(`${M}?limit=100`, { token: owner.accessToken })).body.data.map((x: { userId: string }) => x.userId),
    ).not.toContain(theirs);
  });

  it('pages through the team with a cursor', async () => {
    const t = await signUp(api, 'Big');
    const ids = [t.userId];
    for (let i = 0; i < 4; i++) ids.push((await api.post(M, newMember(), { token: t.accessToken })).body.data.userId);
    const first = await api.get(`${M}?limit=2`, { token: t.accessToken });
    expect(first.body.meta.pagination).toMatchObject({ limit: 2, has_more: true });
    const seen = first.body.data.map((x: { userId: string }) => x.userId);
    let cursor = first.body.meta.pagination.next_cursor;
    while (cursor) {
      const page = await api.get(`${M}?limit=2&cursor=${encodeURIComponent(cursor)}`, { token: t.accessToken });
      seen.push(...page.body.data.map((x: { userId: string }) => x.userId));
      cursor = page.body.meta.pagination.next_cursor;
    }
    expect(seen).toEqual([...ids].reverse());
  });
});
