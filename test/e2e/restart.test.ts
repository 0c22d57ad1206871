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
  const member = { email: `member${Date.now()}@example.com`, name: 'Mem', role: 'member', password: 'password123' };
  expect((await api.post('/api/v1/tenant/team/members', member, { token: owner.accessToken })).status).toBe(201);
  const kid = (await api.get('/.well-known/jwks.json')).body.keys[0].kid;

  // Clean stop: SIGTERM lets every process drain and exit 0.
  expect(await system.stop()).toBe(0);
  system = await startSystem({ DATA_DIR: dataDir });
  api = client(system.url);
  expect((await api.get('/api/v1/tenant', { token: key })).body.data.name).toBe('Durable');
  expect((await api.post('/api/v1/auth/login', { email: member.email, password: member.password })).status).toBe(200);
  // The signing key survived: the access token issued before the restart still verifies.
  expect((await api.get('/api/v1/auth/me', { token: owner.accessToken })).status).toBe(200);
  expect((await api.get('/.well-known/jwks.json')).body.keys[0].kid).toBe(kid);

  // A write acknowledged just before a SIGKILL of every process is still there afterwards.
  const late = await createKey(api, owner.accessToken, { name: 'written right before the kill' });
  await system.kill();
  system = await startSystem({ DATA_DIR: dataDir });
  api = client(system.url);
  expect((await api.get('/api/v1/auth/me', { token: late.key })).status).toBe(200);
  const members = await api.get('/api/v1/tenant/team/members', { token: owner.accessToken });
  expect(members.body.data.map((m: { email: string }) => m.email)).toEqual(expect.arrayContaining([owner.email, member.email]));
  const login = await api.post('/api/v1/auth/login', { email: owner.email, password: owner.password });
  expect(login.status).toBe(200);
});
