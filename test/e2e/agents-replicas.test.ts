import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startFakeOpenAI, echoText, type FakeProviderServer } from '@svc/llm/testing';
import { client, eventually, signUp, type Res } from '../helpers/http';
import { startSystem, type SystemProcess } from '../helpers/process';

// start:cluster with two agents replicas on one host: one replica is SIGKILLed and the supervisor restarts it while
// the other streams slow model replies for every run. The restarted replica must leave the live replica's runs
// alone: each run's model call is made once and each run completes once. Before, both replicas claimed under one
// worker id (the host name), so the restarted one took every live run as its own earlier claim, aborted the calls in
// flight and made (and billed) them again.
jest.setTimeout(120_000);

const API_KEY = 'sk-replicas-test-' + 'k'.repeat(40);
const RUNS = 4;
let dataDir: string;
let fake: FakeProviderServer;
let system: SystemProcess | null = null;

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'svc-agents-replicas-'));
  fake = await startFakeOpenAI({ apiKey: API_KEY });
  // Every reply streams its echo slowly (about 6 s): long enough to be in flight when the replica comes back.
  fake.setDefault((req) => {
    const goal = req.conversation!.messages.find((m) => m.role === 'user')!.text;
    return { type: 'text', text: `${echoText(goal)} ${'word '.repeat(30).trim()}`, delayMs: 150 };
  });
});
afterAll(async () => {
  if (system) await system.kill().catch(() => undefined);
  await fake.close();
  rmSync(dataDir, { recursive: true, force: true });
});

/** Retries what a replica going away answers (the call never reached a service). */
async function retrying(send: () => Promise<Res>): Promise<Res> {
  for (let i = 0; ; i++) {
    const res = await send();
    if (![502, 503, 504].includes(res.status) || i >= 40) return res;
    await new Promise((r) => setTimeout(r, 50));
  }
}

it('a restarted agents replica takes none of the live replica runs: one model call per run, each run completed once', async () => {
  system = await startSystem({
    DATA_DIR: dataDir,
    REPLICAS: '2',
    REPLICATED_SERVICES: 'agents',
    SVC_LAYOUT: 'per-service',
    EGRESS_ALLOW_PRIVATE: 'true',
    AGENTS_POLL_MS: '100',
    AGENTS_TENANT_CONCURRENCY: '8',
    RATE_LIMIT_MAX: '100000',
  });
  expect(system.pids('agents')).toHaveLength(2);
  const api = client(system.url);
  const { accessToken: token } = await signUp(api, 'Agents replicas');
  await api.patch('/api/v1/tenant/settings/llm', { provider: 'openai', model: 'gpt-fake', baseUrl: fake.url, apiKey: API_KEY }, { token });
  const project = (await api.post('/api/v1/projects', { name: 'Replicated' }, { token })).body.data;
  const agent = (await api.post('/api/v1/agents', { name: 'worker', config: { autonomyLevel: 'autonomous' } }, { token })).body.data;

  // One replica goes down; the runs start meanwhile, so the other replica claims them all. The supervisor then
  // brings the killed one back while the calls stream.
  const [victim] = system.pids('agents');
  process.kill(victim, 'SIGKILL');
  const goals = Array.from({ length: RUNS }, (_, i) => `Replicated goal ${i}`);
  const runs = await Promise.all(
    goals.map(async (goal) => {
      const res = await retrying(() => api.post(`/api/v1/agents/${agent.id}/execute`, { goal, projectId: project.id }, { token }));
      expect(res.status).toBe(202);
      return res.body.data.id as string;
    }),
  );
  await eventually(async () => /agents-\d restarted/.test(system!.output()), 30_000, 100);
  expect(system.pids('agents')).toHaveLength(2);
  expect(system.pids('agents')).not.toContain(victim);

  const done: any[] = [];
  await eventually(
    async () => {
      done.length = 0;
      for (const id of runs) done.push((await api.get(`/api/v1/agents/${agent.id}/runs/${id}`, { token })).body.data);
      return done.every((r) => ['completed', 'failed', 'cancelled'].includes(r.status));
    },
    60_000,
    200,
  );
  const callsPerGoal = goals.map((goal) => fake.requests.filter((r) => r.conversation?.messages[0]?.text === goal).length);
  expect(callsPerGoal).toEqual(goals.map(() => 1));
  expect(fake.requests.filter((r) => r.aborted)).toHaveLength(0);
  for (const [i, run] of done.entries()) {
    expect(run).toMatchObject({ status: 'completed', error: null });
    expect(run.output).toContain(echoText(goals[i]));
    expect(run.steps.map((s: { type: string }) => s.type)).toEqual(['model']);
  }
});
