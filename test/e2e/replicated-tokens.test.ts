import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { client, signUp, type Account, type Client } from '../helpers/http';
import { startSystem, type SystemProcess } from '../helpers/process';

// The replicated layout (start:cluster: two identity replicas, two gateways, services in their own processes) on an
// empty data directory: from the first ready answer on, a token signed by either identity replica is accepted by
// every gateway and by the service replicas behind them, which verify it themselves. Before, each identity replica
// made its own signing key at start-up and published only what it had seen, and a gateway refused a key it first met
// within 5 s of a fetch: fresh tokens were refused with 401 for a while after "ready".
jest.setTimeout(180_000);

const TENANTS = 16;
let dataDir: string;
let system: SystemProcess | null = null;

beforeAll(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'svc-replicated-tokens-'));
});
afterAll(async () => {
  if (system) await system.kill().catch(() => undefined);
  rmSync(dataDir, { recursive: true, force: true });
});

/** The gateways' URLs, from the launcher's ready line. */
function gatewayUrls(output: string): string[] {
  const line = output.split('\n').find((l) => l.includes('system ready at'));
  return (JSON.parse(line!) as { gateways: string[] }).gateways;
}

it('accepts every token any identity replica signs, at every gateway and service replica, from the first ready answer on', async () => {
  system = await startSystem({
    DATA_DIR: dataDir,
    REPLICAS: '2',
    GATEWAYS: '2',
    SVC_LAYOUT: 'per-service',
    RATE_LIMIT_MAX: '100000',
    // Sixteen processes start on the 2-core CI machine beside another suite, and the identity replicas share one
    // SQLite file (each BEGIN IMMEDIATE waits out the other's transaction): a sign-up once took longer than the
    // default 5 s and came back 504. This suite is about which tokens are accepted, not about latency.
    GRPC_DEADLINE_MS: '30000',
  });
  expect(system.pids('identity')).toHaveLength(2);
  expect(system.pids('projects')).toHaveLength(2);
  const gateways: Client[] = gatewayUrls(system.output()).map((url) => client(url));
  expect(gateways).toHaveLength(2);

  // The first ready answer of each gateway: from here on every token must be accepted.
  for (const api of gateways) {
    for (let i = 0; (await api.get('/readyz')).status !== 200; i++) {
      if (i > 300) throw new Error('gateway not ready in 30 s');
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  // Tenants register through both gateways, each of which spreads its calls over both identity replicas
  // (round-robin), so both replicas sign tokens; a few at a time, as users arrive.
  const accounts: Account[] = [];
  for (let i = 0; i < TENANTS; i += 4)
    accounts.push(...(await Promise.all([0, 1, 2, 3].map((k) => signUp(gateways[(i + k) % 2], `Cluster tenant ${i + k}`)))));

  // Every token at once at both gateways: a create, which the projects replicas verify on their own too.
  const refused: string[] = [];
  await Promise.all(
    accounts.flatMap((a, i) =>
      gateways.map(async (api, g) => {
        for (let n = 0; n < 2; n++) {
          const res = await api.post('/api/v1/projects', { name: `p${n}` }, { token: a.accessToken });
          if (res.status !== 201) refused.push(`tenant ${i} at gateway ${g + 1}: ${res.status} ${res.body?.error?.message}`);
        }
      }),
    ),
  );
  expect(refused).toEqual([]);
  // Each tenant sees all four of its projects, whichever replica stored them.
  for (const a of accounts) {
    const res = await gateways[1].get('/api/v1/projects', { token: a.accessToken });
    expect(res.status).toBe(200);
    expect(res.body.data).toHaveLength(4);
  }
});
