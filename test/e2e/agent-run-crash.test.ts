import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startFakeOpenAI, echoText, type FakeProviderServer } from '@svc/llm/testing';
import { client, eventually, signUp } from '../helpers/http';
import { startSystem, type SystemProcess } from '../helpers/process';

// The system as `npm start` runs it, killed with SIGKILL (the whole process tree) in the middle of a run while the
// fake provider holds its reply. After a restart the run continues from its recorded steps and completes.
jest.setTimeout(120_000);

const API_KEY = 'sk-crash-test-' + 'k'.repeat(40);
let dataDir: string;
let fake: FakeProviderServer;
let system: SystemProcess | null = null;
let logs = '';

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'svc-agent-crash-'));
  fake = await startFakeOpenAI({ apiKey: API_KEY });
});
afterAll(async () => {
  if (system) await system.kill().catch(() => undefined);
  await fake.close();
  rmSync(dataDir, { recursive: true, force: true });
});

const env = () => ({ DATA_DIR: dataDir, EGRESS_ALLOW_PRIVATE: 'true', LOG_LEVEL: 'trace', AGENTS_POLL_MS: '100' });

it('a run interrupted by SIGKILL of every process resumes from its recorded steps after restart; the API key is in no log line', async () => {
  system = await startSystem(env());
  let api = client(system.url);
  const owner = await signUp(api, 'Crash');
  const token = owner.accessToken;
  await api.patch('/api/v1/tenant/settings/llm', { provider: 'openai', model: 'gpt-fake', baseUrl: fake.url, apiKey: API_KEY }, { token });
  const project = (await api.post('/api/v1/projects', { name: 'Crashy', description: 'before' }, { token })).body.data;
  const agent = (await api.post('/api/v1/agents', { name: 'worker', config: { autonomyLevel: 'autonomous' } }, { token })).body.data;

  // First model call: a tool call that changes data (runs, is recorded); second model call: held until the kill.
  fake.script(
    { type: 'tool_calls', toolCalls: [{ name: 'update_project', arguments: { description: 'written before the crash' } }] },
    { type: 'hang' },
  );
  const goal = 'Survive a crash';
  const run = (await api.post(`/api/v1/agents/${agent.id}/execute`, { goal, projectId: project.id }, { token })).body.data;
  await eventually(async () => fake.requests.length === 2, 20_000);
  const before = (await api.get(`/api/v1/agents/${agent.id}/runs/${run.id}`, { token })).body.data;
  expect(before.status).toBe('running');
  expect(before.steps.map((s: { toolName?: string; type: string; status: string }) => [s.toolName ?? s.type, s.status])).toEqual([
    ['model', 'completed'],
    ['update_project', 'completed'],
  ]);

  await system.kill();
  logs += system.output();
  system = await startSystem(env());
  api = client(system.url);

  // Unscripted now: the fake answers the resumed call with its echo.
  let after: any;
  await eventually(async () => {
    after = (await api.get(`/api/v1/agents/${agent.id}/runs/${run.id}`, { token })).body.data;
    return ['completed', 'failed'].includes(after.status);
  }, 30_000);
  expect(after).toMatchObject({ status: 'completed', output: echoText(goal), error: null });
  // Resumed, not restarted: the tool step is not repeated and the model saw its recorded result.
  expect(after.steps.map((s: { toolName?: string; type: string }) => s.toolName ?? s.type)).toEqual(['model', 'update_project', 'model']);
  const resumed = fake.requests[2].conversation!;
  expect(resumed.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool']);
  expect(resumed.messages[2].text).toContain('written before the crash');
  expect(fake.requests).toHaveLength(3);
  expect((await api.get(`/api/v1/projects/${project.id}`, { token })).body.data.description).toBe('written before the crash');
  for (const r of fake.requests) expect(r.headers.authorization).toBe(`Bearer ${API_KEY}`);

  await system.stop();
  logs += system.output();
  system = null;
  // Verbose logs were captured (trace level, both lives), and the tenant's key is in none of them.
  expect(logs).toContain('taking over an abandoned run');
  expect(logs).not.toContain(API_KEY);
});
