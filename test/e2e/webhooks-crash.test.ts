import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { client, eventually, signUp, type Account, type Client } from '../helpers/http';
import { startSystem, type SystemProcess } from '../helpers/process';
import { startReceiver, verifyWithStandardWebhooks, type Receiver } from '../helpers/receiver';

// Nothing lost: the system as `npm start` runs it, killed with SIGKILL while deliveries are owed, then restarted on
// the same data directory. The receiver stays up throughout (same URL), recording what it acknowledged.
jest.setTimeout(120_000);

const ENV = { WEBHOOK_RETRY_SCHEDULE: '0.3,0.3,0.3,0.3,0.3,0.3', WEBHOOK_TIMEOUT_MS: '3000' };
const SECRET = 'crash-test-secret';

let dataDir: string;
let system: SystemProcess | null = null;
let receiver: Receiver;
/** Event ids the receiver answered 2xx. */
const acknowledged = new Set<string>();

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'svc-webhooks-crash-'));
  receiver = await startReceiver();
});
afterAll(async () => {
  if (system) await system.kill().catch(() => undefined);
  await receiver.close();
  rmSync(dataDir, { recursive: true, force: true });
});

async function up(): Promise<Client> {
  system = await startSystem({ ...ENV, DATA_DIR: dataDir, SVC_LAYOUT: 'per-service' });
  return client(system.url);
}

async function registerHook(api: Client, owner: Account, path: string): Promise<string> {
  const res = await api.post(
    '/api/v1/webhooks',
    { url: `${receiver.url}${path}`, events: ['project.created'], secret: SECRET },
    { token: owner.accessToken },
  );
  expect(res.status).toBe(201);
  return res.body.data.id;
}

function ok(r: { json: any }, delayMs = 0) {
  acknowledged.add(r.json.id);
  return { status: 200, body: 'ok', delayMs };
}

it('delivers an event owed when the whole process tree was SIGKILLed', async () => {
  let api = await up();
  const owner = await signUp(api, 'Crash');
  const hookId = await registerHook(api, owner, '/tree');
  // The first request of each event is held open: the system never sees it acknowledged before the kill.
  const seen = new Set<string>();
  receiver.answer = (r) => {
    if (r.path !== '/tree') return { status: 404 };
    if (!seen.has(r.json.id)) {
      seen.add(r.json.id);
      return 'hold';
    }
    return ok(r);
  };
  const held = (await api.post('/api/v1/projects', { name: 'held' }, { token: owner.accessToken })).body.data;
  await eventually(async () => receiver.at('/tree').some((r) => r.json.data.id === held.id), 10_000);
  // Created right before the kill: still in the outbox, on the bus or in the queue (behind the held one).
  const late = (await api.post('/api/v1/projects', { name: 'late' }, { token: owner.accessToken })).body.data;
  await system!.kill();
  expect(receiver.at('/tree').some((r) => r.json.data.id === late.id)).toBe(false);

  api = await up();
  await eventually(async () => {
    const got = receiver.at('/tree').filter((r) => acknowledged.has(r.json.id));
    return [held.id, late.id].every((id) => got.some((r) => r.json.data.id === id));
  }, 30_000);
  const requests = receiver.at('/tree');
  const heldRequests = requests.filter((r) => r.json.data.id === held.id);
  expect(new Set(heldRequests.map((r) => r.headers['webhook-id'])).size).toBe(1); // the same webhook-id on the re-send
  for (const r of requests) expect(verifyWithStandardWebhooks(r, SECRET)).toEqual(r.json);
  await eventually(async () => {
    const list = (await api.get(`/api/v1/webhooks/${hookId}/deliveries`, { token: owner.accessToken })).body.data;
    return list.length === 2 && list.every((d: { status: string }) => d.status === 'succeeded');
  });
});

// Runs on the system the previous test restarted (each start of five processes costs seconds on CI).
it('delivers every event of a batch when the webhooks process is SIGKILLed mid-batch', async () => {
  const api = client(system!.url);
  const owner = await signUp(api, 'Mid batch');
  const hookId = await registerHook(api, owner, '/batch');
  receiver.answer = (r) => (r.path === '/batch' ? ok(r, 40) : { status: 404 });
  const N = 40;
  const created: string[] = [];
  for (let i = 0; i < N; i += 8) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(8, N - i) }, (_, j) =>
        api.post('/api/v1/projects', { name: `p${i + j}` }, { token: owner.accessToken }),
      ),
    );
    created.push(...batch.map((r) => r.body.data.id));
  }
  await eventually(async () => receiver.at('/batch').length >= 5, 10_000);
  const killed = await system!.killService('webhooks');
  const before = new Set(receiver.at('/batch').map((r) => r.json.data.id));
  expect(before.size).toBeLessThan(N);

  // The launcher restarts it on its own (supervision); the rest of the system never stopped.
  await system!.restarted('webhooks', killed);
  await eventually(async () => {
    const got = new Set(
      receiver
        .at('/batch')
        .filter((r) => acknowledged.has(r.json.id))
        .map((r) => r.json.data.id),
    );
    return created.every((id) => got.has(id));
  }, 30_000);
  // One delivery record per event, each succeeded: redelivery on the bus made no second record.
  const list = (await api.get(`/api/v1/webhooks/${hookId}/deliveries?limit=100`, { token: owner.accessToken })).body.data;
  expect(list).toHaveLength(N);
  expect(new Set(list.map((d: { eventId: string }) => d.eventId)).size).toBe(N);
  await eventually(async () => {
    const now = (await api.get(`/api/v1/webhooks/${hookId}/deliveries?limit=100`, { token: owner.accessToken })).body.data;
    return now.every((d: { status: string }) => d.status === 'succeeded');
  });
});
