import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { startIdentity } from '@svc/identity';
import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, eventually, signUp, type Client } from '../helpers/http';
import { startSystem, type SystemProcess } from '../helpers/process';
import { TEST_SYSTEM_ENV } from '../helpers/system-env';

// Credit reservations are exact across replicas (issue 20, 1): `npm run start:cluster`'s layout, two gateways and two
// replicas of chat, agents and billing. A tenant has credit for exactly 10 model calls; 40 chat messages and agent
// runs race for it: 10 are accepted, 30 get 402, and the balance ends at 0, never below. With the old cached balance
// check every request within the cache window saw a positive balance and went ahead.
jest.setTimeout(120_000);

const ADMIN = 'admin-token-reservations';
// A call reserves its prompt (here 1 token) plus LLM_MAX_TOKENS (99) at 1 credit a token: 100 credits.
const PER_CALL = 100;
let dataDir: string;
let system: SystemProcess | null = null;
let gateways: Client[];
let llm: FakeProviderServer;

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'svc-reservations-'));
  const seed = await startIdentity({ DATA_DIR: dataDir, IDENTITY_PORT: '0', LOG_LEVEL: 'silent', ...TEST_SYSTEM_ENV });
  await seed.stop();
  llm = await startFakeOpenAI({ apiKey: 'sk-reserve' });
  // Every call uses what it reserved (1 + 99 tokens): a call that ends frees nothing for another.
  llm.setDefault(() => ({ type: 'text', text: 'done', delayMs: 20, usage: { inputTokens: 1, outputTokens: 99 } }));
  system = await startSystem({
    DATA_DIR: dataDir,
    REPLICAS: '2',
    REPLICATED_SERVICES: 'chat,agents,billing',
    GATEWAYS: '2',
    SVC_LAYOUT: 'per-service',
    SVC_ADMIN_TOKEN: ADMIN,
    RATE_LIMIT_MAX: '1000000',
    EGRESS_ALLOW_PRIVATE: 'true',
    BILLING_STARTING_GRANT: '0',
    CREDITS_PER_1K_TOKENS: '1000',
    LLM_MAX_TOKENS: '99',
    CHAT_TENANT_CONCURRENCY: '100',
    AGENTS_TENANT_CONCURRENCY: '100',
    AGENTS_POLL_MS: '200',
    // Sixteen processes on a 2-core machine beside other suites: forty reservations serialised on one SQLite file
    // can take longer than the default 5 s deadline, which this suite (about exactness, not latency) does not test.
    GRPC_DEADLINE_MS: '30000',
  });
  const urls = /"gateways":(\[[^\]]*\])/.exec(system.output())?.[1];
  gateways = (JSON.parse(urls ?? '[]') as string[]).map((url) => client(url));
  expect(gateways).toHaveLength(2);
});
afterAll(async () => {
  if (system) await system.kill().catch(() => undefined);
  await llm?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

it('accepts exactly the calls the available credits cover, across gateways and replicas; the rest get 402', async () => {
  const [g1, g2] = gateways;
  const owner = await signUp(g1, 'Exact');
  const t = { token: owner.accessToken };
  const credits = async () => (await g2.get('/api/v1/billing/summary', t)).body.data.credits as Record<string, number>;
  expect(await credits()).toEqual({ balance: 0, reserved: 0, available: 0 });
  const admin = { headers: { authorization: `Bearer ${ADMIN}` } };
  const adjusted = await g1.post(`/api/v1/admin/tenants/${owner.tenantId}/credits`, { delta: 10 * PER_CALL, reason: 'test' }, admin);
  expect(adjusted.status).toBe(200);
  await g1.patch('/api/v1/tenant/settings/llm', { provider: 'openai', model: 'gpt-fake', baseUrl: llm.url, apiKey: 'sk-reserve' }, t);
  const agent = (await g1.post('/api/v1/agents', { name: 'a', systemPrompt: 'p', config: { autonomyLevel: 'manual' } }, t)).body.data.id;
  const project = (await g1.post('/api/v1/projects', { name: 'p' }, t)).body.data.id;
  const sessions: string[] = [];
  for (let i = 0; i < 20; i++) sessions.push((await g1.post('/api/v1/chat/sessions', { title: `s${i}` }, t)).body.data.id);

  // 20 messages ("hi": 1 token) and 20 runs (instructions "p", goal "g": 1 token), alternating gateways.
  const requests = [
    ...sessions.map((s, i) => () => gateways[i % 2].post(`/api/v1/chat/sessions/${s}/messages`, { content: 'hi' }, t)),
    ...sessions.map((_, i) => () => gateways[(i + 1) % 2].post(`/api/v1/agents/${agent}/execute`, { goal: 'g', projectId: project }, t)),
  ];
  const answers = await Promise.all(requests.map((send) => send()));
  const statuses = answers.map((r) => r.status);
  const accepted = statuses.filter((s) => s === 202).length;
  const refused = answers.filter((r) => r.status === 402 && r.body.error?.code === 'INSUFFICIENT_CREDITS').length;
  expect({ accepted, refused, other: statuses.filter((s) => s !== 202 && s !== 402) }).toEqual({ accepted: 10, refused: 30, other: [] });

  // Every accepted call ends and settles: 10 calls of 100 credits, nothing reserved, nothing below zero.
  await eventually(async () => {
    const c = await credits();
    expect(c.balance).toBeGreaterThanOrEqual(0);
    return c.reserved === 0 && c.balance === 0;
  }, 30_000);
  expect(await credits()).toEqual({ balance: 0, reserved: 0, available: 0 });
  const db = new Database(join(dataDir, 'billing.db'), { readonly: true });
  try {
    const entries = db.prepare("SELECT COUNT(*) AS n FROM ledger WHERE json_extract(doc, '$.kind') = 'usage'").get() as { n: number };
    expect(entries.n).toBe(10);
  } finally {
    db.close();
  }
  expect(llm.requests.filter((r) => r.conversation).length).toBe(10);
  // Nothing more can start.
  const more = await g2.post(`/api/v1/chat/sessions/${sessions[0]}/messages`, { content: 'hi' }, t);
  expect(more.status).toBe(402);
});
