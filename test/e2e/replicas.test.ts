import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openEmbeddedBus, type EmbeddedBus } from '@svc/kit';
import { decodeDomainEvent, TOPICS } from '@svc/contracts';
import { client, signUp, type Account, type Client, type Res } from '../helpers/http';
import { startSystem, type SystemProcess } from '../helpers/process';
import { startReceiver, type Receiver } from '../helpers/receiver';

// Three replicas of projects and of webhooks on one store and bus each (npm start with REPLICAS), the gateway
// balancing calls over them, many tenants writing at once, and one projects replica SIGKILLed midway: every change is
// published, each tenant's events reach a consumer in the order the changes committed, every change reaches each
// tenant's webhook (deliveries shared by the webhooks replicas), and duplicates are only those at-least-once allows.
jest.setTimeout(180_000);

const TENANTS = 12;
const UPDATES = 6;
let dataDir: string;
let system: SystemProcess | null = null;
let bus: EmbeddedBus | null = null;
let receiver: Receiver | null = null;

beforeAll(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'svc-replicas-'));
});
afterAll(async () => {
  await bus?.close();
  await receiver?.close();
  if (system) await system.kill().catch(() => undefined);
  rmSync(dataDir, { recursive: true, force: true });
});

/** Retries what a replica going away answers (503/502/504): an update sets a value, so a retry is harmless. */
async function retrying(send: () => Promise<Res>): Promise<Res> {
  for (let i = 0; ; i++) {
    const res = await send();
    if (![502, 503, 504].includes(res.status) || i >= 40) return res;
    await new Promise((r) => setTimeout(r, 100));
  }
}

it('publishes every change of every tenant once or more, in commit order per tenant, across a SIGKILL of a replica', async () => {
  system = await startSystem({
    DATA_DIR: dataDir,
    REPLICAS: '3',
    REPLICATED_SERVICES: 'projects,webhooks',
    RATE_LIMIT_MAX: '100000',
    SVC_LAYOUT: 'per-service',
    EGRESS_ALLOW_PRIVATE: 'true',
  });
  expect(system.pids('projects')).toHaveLength(3);
  expect(system.pids('webhooks')).toHaveLength(3);
  receiver = await startReceiver();
  const api: Client = client(system.url);

  // What a consumer on the bus sees, per tenant: the name each project.updated carries.
  bus = openEmbeddedBus({ path: join(dataDir, 'bus.db') });
  const seenIds = new Set<string>();
  const names = new Map<string, string[]>();
  let duplicates = 0;
  await bus.subscribe({
    group: 'replicas-test',
    topics: [TOPICS.projects],
    handler: async (m) => {
      if (seenIds.has(m.id)) return void duplicates++; // a consumer's idempotency: by event id
      seenIds.add(m.id);
      const e = decodeDomainEvent(m.value);
      if (e.type !== 'project.updated' || e.data?.$case !== 'project') return;
      names.set(e.tenantId, [...(names.get(e.tenantId) ?? []), e.data.value.name]);
    },
  });

  const tenants: Account[] = [];
  for (let i = 0; i < TENANTS; i++) tenants.push(await signUp(api, `Replica tenant ${i}`));
  for (const [i, t] of tenants.entries()) {
    const hook = { url: `${receiver.url}/t${i}`, events: ['project.updated'], secret: `replica-secret-${i}-0123456789` };
    expect((await api.post('/api/v1/webhooks', hook, { token: t.accessToken })).status).toBe(201);
  }
  const projects = await Promise.all(
    tenants.map(async (t) => (await api.post('/api/v1/projects', { name: 'v0' }, { token: t.accessToken })).body.data.id as string),
  );

  // Each tenant updates its project in sequence (so its commit order is known); all tenants at once.
  let killed = 0;
  const work = tenants.map(async (t, i) => {
    for (let v = 1; v <= UPDATES; v++) {
      const res = await retrying(() => api.patch(`/api/v1/projects/${projects[i]}`, { name: `v${v}` }, { token: t.accessToken }));
      expect(res.status).toBe(200);
      if (i === 0 && v === 2) {
        const victim = system!.pids('projects')[0];
        process.kill(victim, 'SIGKILL');
        killed = victim;
      }
    }
  });
  await Promise.all(work);
  expect(killed).toBeGreaterThan(0);

  const expected = Array.from({ length: UPDATES }, (_, v) => `v${v + 1}`);
  const deadline = Date.now() + 30_000;
  const complete = () => tenants.every((t) => expected.every((n) => names.get(t.tenantId)?.includes(n)));
  while (!complete() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));

  for (const t of tenants) {
    const got = names.get(t.tenantId) ?? [];
    // Every change arrived; in commit order (a retried update that had committed may repeat its value in place).
    expect(got.filter((n, i) => n !== got[i - 1])).toEqual(expected);
  }
  // Every change reached its tenant's webhook, and only its tenant's, whichever webhooks replica delivered it.
  const delivered = (i: number) => new Set(receiver!.at(`/t${i}`).map((r) => r.json?.data?.name as string));
  const allDelivered = () => tenants.every((_, i) => expected.every((n) => delivered(i).has(n)));
  while (!allDelivered() && Date.now() < deadline + 30_000) await new Promise((r) => setTimeout(r, 100));
  for (const [i, t] of tenants.entries()) {
    expect([...delivered(i)].filter((n) => n !== 'v0').sort()).toEqual(expected);
    expect(receiver.at(`/t${i}`).every((r) => r.json.tenantId === t.tenantId)).toBe(true);
  }
  // Redeliveries exist only as at-least-once allows; the consumer dropped them by id.
  expect(duplicates).toBeLessThan(TENANTS * UPDATES);
  // The supervisor brought the killed replica back.
  const back = Date.now() + 60_000;
  while (system.pids('projects').length < 3 && Date.now() < back) await new Promise((r) => setTimeout(r, 200));
  expect(system.pids('projects')).toHaveLength(3);
  expect(system.pids('projects')).not.toContain(killed);
});
