import { startGateway, type RunningGateway } from '@svc/gateway';
import { startIdentity } from '@svc/identity';
import { metrics, type RunningService } from '@svc/kit';
import { client, createKey, eventually, signUp } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// The gateways follow identity's revocation feed through a watch stream (WatchRevocations) instead of polling it:
// an idle gateway reads nothing, a revocation still reaches every gateway within the contract's second, also when
// another identity replica recorded it.
jest.setTimeout(60_000);

let stack: Stack;
let identity2: RunningService;
let gateway2: RunningGateway;

/** ListRevocations calls identity has answered so far (the stack runs in this process: one registry). */
async function feedReads(): Promise<number> {
  const metric = await metrics.grpcHandled.get();
  return metric.values.filter((v) => String(v.labels.method).endsWith('/ListRevocations')).reduce((n, v) => n + v.value, 0);
}

beforeAll(async () => {
  stack = await startStack();
  // A second identity replica on the same store, and a gateway that talks to it alone.
  identity2 = await startIdentity({ ...stack.env, IDENTITY_PORT: '0' });
  gateway2 = await startGateway({ ...stack.env, IDENTITY_ADDR: `127.0.0.1:${identity2.port}`, INSTANCE_ID: 'gw-other' });
});
afterAll(async () => {
  await gateway2?.stop();
  await identity2?.stop();
  await stack?.stop();
});

it('reads the feed when told: an idle gateway makes no ListRevocations calls but a safety read every 10 s', async () => {
  const api = client(stack.url);
  await signUp(api, 'Idle feed');
  await new Promise((r) => setTimeout(r, 300)); // the sign-up's own notices settle
  const before = await feedReads();
  await new Promise((r) => setTimeout(r, 2000)); // four polls' worth at the old 500 ms
  // Two gateways: at most one safety read each in 2 s (SAFETY_READ_MS), against eight reads when polling.
  expect(await feedReads()).toBeLessThanOrEqual(before + 2);
});

it('a key revoked through one identity replica is refused by a gateway that watches the other', async () => {
  const api = client(stack.url);
  const other = client(gateway2.url);
  const owner = await signUp(api, 'Two replicas');
  const { key, id } = await createKey(api, owner.accessToken);
  expect((await api.get('/api/v1/tenant', { token: key })).status).toBe(200);
  expect((await other.get('/api/v1/tenant', { token: key })).status).toBe(200);

  const before = await feedReads();
  expect((await other.del(`/api/v1/api-keys/${id}`, { token: owner.accessToken })).status).toBe(200);
  // The first gateway hears of it through its own replica's feed (which noticed the other replica's write).
  const ms = await eventually(async () => (await api.get('/api/v1/tenant', { token: key })).status === 401, 3000, 25);
  expect((await other.get('/api/v1/tenant', { token: key })).status).toBe(401);
  expect(await feedReads()).toBeGreaterThan(before);
  console.info(`revocation through the other replica refused after ${ms} ms`);
});
