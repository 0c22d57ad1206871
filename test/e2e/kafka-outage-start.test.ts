import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startKafkaBroker, type KafkaBroker } from '../kafka/broker';
import { client, eventually, signUp } from '../helpers/http';
import { startSystem, type SystemProcess } from '../helpers/process';
import { startReceiver, type Receiver } from '../helpers/receiver';

// Issue 19 (2d): a service rescheduled during a Kafka outage must serve (identity: sign-in) instead of waiting for
// its consumers, say so on /readyz, and catch up on what was published meanwhile once the broker is back.
jest.setTimeout(150_000);

const ADMIN = 'outage-admin-token-0123456789';
let dataDir: string;
let broker: KafkaBroker;
let system: SystemProcess | null = null;
let receiver: Receiver;

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'svc-kafka-outage-'));
  // Its own broker (the suite's stays up for the others), down when the system starts: formatted, not yet run.
  broker = await startKafkaBroker({ launch: false });
  receiver = await startReceiver();
});
afterAll(async () => {
  if (system) await system.kill().catch(() => undefined);
  await receiver?.close();
  await broker?.destroy();
  rmSync(dataDir, { recursive: true, force: true });
});

it('starts and serves with the broker down, reports the bus on /readyz, and catches up when it returns', async () => {
  system = await startSystem({ DATA_DIR: dataDir, KAFKA_BROKERS: broker.brokers, SVC_LAYOUT: 'per-service', SVC_ADMIN_TOKEN: ADMIN });
  const api = client(system.url);

  // Identity serves: register and sign in.
  const owner = await signUp(api, 'Outage');
  const login = await api.post('/api/v1/auth/login', { email: owner.email, password: owner.password });
  expect(login.status).toBe(200);
  // Webhooks serves too: a registration for project.created, and a project created while the bus is away.
  const hook = await api.post(
    '/api/v1/webhooks',
    { url: `${receiver.url}/hook`, events: ['project.created'], secret: 'outage-secret' },
    { token: owner.accessToken },
  );
  expect(hook.status).toBe(201);
  const project = await api.post('/api/v1/projects', { name: 'while kafka was down' }, { token: owner.accessToken });
  expect(project.status).toBe(201);

  // Degraded, naming the bus of every service that uses it.
  const ready = await api.get('/readyz');
  expect(ready.status).toBe(503);
  expect(ready.body.error.details.down).toEqual(expect.arrayContaining(['identity bus', 'billing bus', 'webhooks bus', 'regions bus']));
  // Billing serves (a tenant's first call grants its starting credits, whether or not tenant.created arrived), and an
  // operator's plan change waits in billing's outbox: identity has not applied it.
  const before = await api.get('/api/v1/billing/summary', { token: owner.accessToken });
  expect(before.body.data.credits.balance).toBe(1000);
  const admin = { token: ADMIN };
  expect((await api.patch(`/api/v1/admin/tenants/${owner.tenantId}`, { plan: 'growth' }, admin)).status).toBe(200);
  await new Promise((r) => setTimeout(r, 500));
  expect((await api.get('/api/v1/tenant', { token: owner.accessToken })).body.data.plan).toBe('free');
  expect(receiver.at('/hook')).toHaveLength(0);

  await broker.start();
  // Published meanwhile, now consumed: identity applies the plan change, webhooks deliver project.created, and
  // billing's consumer applies tenant.created without a second grant.
  await eventually(async () => (await api.get('/api/v1/tenant', { token: owner.accessToken })).body.data?.plan === 'growth', 60_000, 250);
  await eventually(
    async () => receiver.at('/hook').some((r) => r.json.type === 'project.created' && r.json.data.id === project.body.data.id),
    30_000,
    250,
  );
  await eventually(async () => (await api.get('/readyz')).status === 200, 30_000, 250);
  expect((await api.get('/api/v1/billing/summary', { token: owner.accessToken })).body.data.credits.balance).toBe(1000);

  expect(await system.stop()).toBe(0);
  system = null;
});
