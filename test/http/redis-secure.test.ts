import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startGateway, type RunningGateway } from '@svc/gateway';
import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { freePort, startRedis } from '../helpers/redis';
import { startStack, type Stack } from '../helpers/stack';
import { makeTestCertificates, type TestCertificates } from '../helpers/tls';

// Issue 33 (2): Redis over TLS with an ACL user, as a managed Redis is reached: REDIS_URL=rediss://user:password@...
// and the CA in REDIS_TLS_CA_FILE. Two gateways share one rate-limit count and hear revocations through it; a
// gateway given a wrong password or a CA that did not sign Redis's certificate is not ready and says why (one that
// cannot reach Redis stays ready, degraded).
const USER = 'svc-gateway';
const PASSWORD = 'gateway-secret-0123';
/** What the gateways and identity use, and no more: the limiter's scripts, MGET, and the revocation channel. */
const RULES = 'resetchannels ~svc:* &svc:* +eval +get +incr +pexpire +mget +subscribe +publish +ping +info +client';
const MAX = 20;

let tlsDir: string;
let certs: TestCertificates;
let redis: Awaited<ReturnType<typeof startRedis>>;
let stack: Stack;
let a: Client;
let b: Client;
let owner: Account;

beforeAll(async () => {
  tlsDir = mkdtempSync(join(tmpdir(), 'svc-redis-tls-'));
  certs = makeTestCertificates(tlsDir);
  redis = await startRedis(undefined, { tls: certs, users: [{ name: USER, password: PASSWORD, rules: RULES }] });
  stack = await startStack({
    gateways: 2,
    env: {
      REDIS_URL: redis.urlFor(USER, PASSWORD),
      REDIS_TLS_CA_FILE: certs.caFile,
      RATE_LIMIT_MAX: String(MAX),
      RATE_LIMIT_WINDOW_S: '86400',
      REVOCATION_POLL_MS: '1000',
    },
  });
  a = client(stack.gateways[0].url);
  b = client(stack.gateways[1].url);
  owner = await signUp(a, 'Secured');
});
afterAll(async () => {
  await stack?.stop();
  await redis?.stop();
  rmSync(tlsDir, { recursive: true, force: true });
});

// First: ioredis gives a closed connection 2 s to close once more after disconnect() (a timer of its connector), which
// the tests after these outlast.
describe('a gateway whose Redis settings are refused is not ready, and says why', () => {
  let gateway: RunningGateway | null = null;
  afterEach(async () => {
    await gateway?.stop();
    gateway = null;
  });

  const readiness = async (env: Record<string, string>) => {
    gateway = await startGateway({ ...stack.env, INSTANCE_ID: 'gw-refused', ...env });
    const api = client(gateway.url);
    let res = await api.get('/readyz');
    const said = (body: typeof res.body) => body.error?.details?.reasons?.redis ?? body.data?.degraded?.redis;
    // Until Redis's verdict is in, and no service's health check is still out (one can time out on a loaded machine).
    const settled = (body: typeof res.body) => said(body) !== undefined && (body.error?.details?.down ?? ['redis']).join() === 'redis';
    await eventually(async () => settled((res = await api.get('/readyz')).body), 10_000, 100);
    // It still serves (rate limits counted locally) while it is kept out of rotation.
    const { key } = await createKey(api, owner.accessToken);
    expect((await api.get('/api/v1/tenant', { token: key })).status).toBe(200);
    return res;
  };

  it('a wrong password', async () => {
    const res = await readiness({ REDIS_URL: redis.urlFor(USER, 'not-the-password') });
    expect(res.status).toBe(503);
    expect(res.body.error.details.down).toEqual(['redis']);
    expect(res.body.error.details.reasons.redis).toBe('Redis: authentication failed (check the user and password in REDIS_URL)');
    expect(res.body.error.message).toContain('redis (Redis: authentication failed');
    expect(JSON.stringify(res.body)).not.toContain('not-the-password');
  });

  it('a CA that did not sign the server certificate', async () => {
    const res = await readiness({ REDIS_URL: redis.urlFor(USER, PASSWORD), REDIS_TLS_CA_FILE: certs.otherCaFile });
    expect(res.status).toBe(503);
    expect(res.body.error.details.reasons.redis).toBe(
      'Redis: TLS certificate not trusted (check REDIS_TLS_CA_FILE and the host in REDIS_URL)',
    );
  });

  it('but Redis away is an outage to ride out (decision 9): ready, and degraded', async () => {
    const res = await readiness({ REDIS_URL: `rediss://${USER}:${PASSWORD}@127.0.0.1:${await freePort()}` });
    expect(res.status).toBe(200);
    expect(res.body.data.degraded).toEqual({
      redis: 'Redis: unreachable (check the host and port in REDIS_URL, and rediss:// if the server expects TLS)',
    });
  });
});

it('the gateways are ready over TLS with the ACL user, and share one rate-limit count', async () => {
  for (const gw of [a, b]) {
    const ready = await gw.get('/readyz');
    expect(ready.status).toBe(200);
    expect(ready.body.data.degraded).toBeUndefined();
  }
  const { key } = await createKey(a, owner.accessToken);
  const seen: number[] = [];
  for (let i = 0; i < MAX; i++)
    seen.push(Number((await (i % 2 ? b : a).get('/api/v1/tenant', { token: key })).headers.get('x-ratelimit-remaining')));
  // One count across both instances, kept in Redis: MAX-1, MAX-2, ... 0.
  expect(seen).toEqual(Array.from({ length: MAX }, (_, i) => MAX - 1 - i));
  for (const gw of [a, b]) expectError(await gw.get('/api/v1/tenant', { token: key }), 429, 'RATE_LIMIT_EXCEEDED');
});

it('a key revoked through one gateway is refused by the other within a poll, told through Redis', async () => {
  const { key, id } = await createKey(a, owner.accessToken);
  expect((await b.get('/api/v1/tenant', { token: key })).status).toBe(200);
  expect((await a.del(`/api/v1/api-keys/${id}`, { token: owner.accessToken })).status).toBe(200);
  await eventually(async () => (await b.get('/api/v1/tenant', { token: key })).status === 401, 3000, 10);
});
