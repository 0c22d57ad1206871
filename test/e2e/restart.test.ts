import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { client, createKey, signUp } from '../helpers/http';
import { startSystem, type SystemProcess } from '../helpers/process';

// The system as `npm start` runs it: a launcher, identity and the gateway as separate processes.
jest.setTimeout(120_000);

let dataDir: string;
let system: SystemProcess | null = null;

beforeAll(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'svc-restart-'));
});
afterAll(async () => {
  if (system) await system.kill().catch(() => undefined);
  rmSync(dataDir, { recursive: true, force: true });
});

it('keeps tenants, users, keys and signing keys across a clean restart and a SIGKILL of the whole tree', async () => {
  system = await startSystem({ DATA_DIR: dataDir });
  let api = client(system.url);
  const owner = await signUp(api, 'Durable');
  const { key } = await createKey(api, owner.accessToken, { name: 'durable key' });
  const scoped = await createKey(api, owner.accessToken, { name: 'scoped', type: 'ci', environment: 'staging', scopes: ['projects:read'] });
  const revoked = await createKey(api, owner.accessToken, { name: 'revoked' });
  expect((await api.del(`/api/v1/api-keys/${revoked.id}`, { token: owner.accessToken })).status).toBe(200);
  const member = { email: `member${Date.now()}@example.com`, name: 'Mem', role: 'member', password: 'password123' };
  const added = await api.post('/api/v1/tenant/team/members', member, { token: owner.accessToken });
  expect(added.status).toBe(201);
  const admin = { email: `admin${Date.now()}@example.com`, name: 'Adm', role: 'member', password: 'password123' };
  const promoted = (await api.post('/api/v1/tenant/team/members', admin, { token: owner.accessToken })).body.data.userId;
  expect((await api.patch(`/api/v1/tenant/team/members/${promoted}`, { role: 'admin' }, { token: owner.accessToken })).status).toBe(200);
  expect(
    (await api.put('/api/v1/tenant/security/network', { ipAllowlist: ['127.0.0.0/8', '2001:db8::/32'] }, { token: owner.accessToken }))
      .status,
  ).toBe(200);
  const keysBefore = (await api.get('/api/v1/api-keys', { token: owner.accessToken })).body.data;
  const kid = (await api.get('/.well-known/jwks.json')).body.keys[0].kid;

  // Clean stop: SIGTERM lets every process drain and exit 0.
  expect(await system.stop()).toBe(0);
  system = await startSystem({ DATA_DIR: dataDir });
  api = client(system.url);
  expect((await api.get('/api/v1/tenant', { token: key })).body.data.name).toBe('Durable');
  expect((await api.post('/api/v1/auth/login', { email: member.email, password: member.password })).status).toBe(200);
  // API keys: the list, scopes and environment, and a revocation all survive.
  // (lastUsedAt and the live usage counts move on: the durable key was just used.)
  const stable = (keys: Array<Record<string, unknown>>) => keys.map(({ lastUsedAt: _used, usage: _usage, ...k }) => k);
  expect(stable((await api.get('/api/v1/api-keys', { token: owner.accessToken })).body.data)).toEqual(stable(keysBefore));
  expect(keysBefore.map((k: { id: string }) => k.id)).not.toContain(revoked.id);
  expect((await api.get('/api/v1/auth/me', { token: scoped.key })).body.data.credential).toEqual({
    type: 'api_key',
    id: scoped.id,
    environment: 'staging',
    scopes: ['projects:read'],
  });
  expect((await api.get('/api/v1/projects', { token: scoped.key })).status).toBe(200);
  expect((await api.post('/api/v1/projects', { name: 'x' }, { token: scoped.key })).status).toBe(403);
  expect((await api.get('/api/v1/tenant', { token: revoked.key })).status).toBe(401);
  // Team: members and roles; security settings.
  const team = (await api.get('/api/v1/tenant/team/members', { token: owner.accessToken })).body.data;
  expect(team.map((m: { userId: string; role: string }) => [m.userId, m.role]).sort()).toEqual(
    [
      [owner.userId, 'owner'],
      [added.body.data.userId, 'member'],
      [promoted, 'admin'],
    ].sort(),
  );
  const adminLogin = await api.post('/api/v1/auth/login', { email: admin.email, password: admin.password });
  expect(adminLogin.body.data.user.role).toBe('admin');
  expect((await api.get('/api/v1/tenant/security/network', { token: adminLogin.body.data.accessToken })).body.data).toEqual({
    ipAllowlist: ['127.0.0.0/8', '2001:db8::/32'],
  });
  // The signing key survived: the access token issued before the restart still verifies.
  expect((await api.get('/api/v1/auth/me', { token: owner.accessToken })).status).toBe(200);
  expect((await api.get('/.well-known/jwks.json')).body.keys[0].kid).toBe(kid);

  // A write acknowledged just before a SIGKILL of every process is still there afterwards.
  const late = await createKey(api, owner.accessToken, { name: 'written right before the kill' });
  await system.kill();
  system = await startSystem({ DATA_DIR: dataDir });
  api = client(system.url);
  expect((await api.get('/api/v1/auth/me', { token: late.key })).status).toBe(200);
  expect((await api.get('/api/v1/tenant', { token: revoked.key })).status).toBe(401);
  const members = await api.get('/api/v1/tenant/team/members', { token: owner.accessToken });
  expect(members.body.data.map((m: { email: string }) => m.email)).toEqual(expect.arrayContaining([owner.email, member.email]));
  const login = await api.post('/api/v1/auth/login', { email: owner.email, password: owner.password });
  expect(login.status).toBe(200);
});
