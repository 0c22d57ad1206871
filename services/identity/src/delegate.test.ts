import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decodeJwt } from 'jose';
import { createClient, type RunningService } from '@svc/kit';
import { identityV1 } from '@svc/proto';
import { startIdentity } from './server';

// DelegateToken over real gRPC: what a service gets for background work on a caller's behalf.
let dir: string;
let svc: RunningService;
let client: ReturnType<typeof createClient<typeof identityV1.IdentityServiceService>>;
let token: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'identity-'));
  svc = await startIdentity({ DATA_DIR: dir, LOG_LEVEL: 'silent', IDENTITY_PORT: '0', PASSWORD_HASH_COST: '10' });
  client = createClient(identityV1.IdentityServiceService, `127.0.0.1:${svc.port}`, { deadlineMs: 5000 });
  const reg = await client.register({ email: `d${Date.now()}@example.com`, password: 'password123', name: 'D', tenantName: 'D' });
  token = reg.tokens!.accessToken;
});
afterAll(async () => {
  client.close();
  await svc.stop();
  rmSync(dir, { recursive: true, force: true });
});

it('keeps the caller identity, limits scopes and lifetime', async () => {
  const res = await client.delegateToken({ scopes: ['projects:read', 'projects:write'], ttlSeconds: 1800 }, { token });
  const caller = decodeJwt(token);
  const claims = decodeJwt(res.token);
  expect(claims).toMatchObject({
    sub: caller.sub,
    tid: caller.tid,
    role: 'owner',
    sid: caller.sid,
    scp: ['projects:read', 'projects:write'],
  });
  expect(claims.exp! - claims.iat!).toBe(1800);
  expect(res.expiresAt).toBeGreaterThan(Date.now() + 1700_000);
  const capped = decodeJwt((await client.delegateToken({ scopes: ['projects:read'], ttlSeconds: 999_999 }, { token })).token);
  expect(capped.exp! - capped.iat!).toBe(3600);
});

it('never grants a scoped caller more than it has', async () => {
  const scoped = await client.delegateToken({ scopes: ['projects:read'], ttlSeconds: 600 }, { token });
  const again = await client.delegateToken({ scopes: ['projects:read', 'projects:write'], ttlSeconds: 600 }, { token: scoped.token });
  expect(decodeJwt(again.token).scp).toEqual(['projects:read']);
});

it('refuses unknown scopes, an empty list and a missing token', async () => {
  await expect(client.delegateToken({ scopes: ['root'], ttlSeconds: 60 }, { token })).rejects.toMatchObject({ code: 'VALIDATION_ERROR' });
  await expect(client.delegateToken({ scopes: [], ttlSeconds: 60 }, { token })).rejects.toMatchObject({ code: 'VALIDATION_ERROR' });
  await expect(client.delegateToken({ scopes: ['projects:read'], ttlSeconds: 60 })).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
});
