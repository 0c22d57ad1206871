import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, eventually, signUp } from '../helpers/http';
import { startSystem, type SystemProcess } from '../helpers/process';

// The system as `npm start` runs it; billing is killed with SIGKILL while model calls keep publishing usage, and the
// launcher restarts it. Every call is billed exactly once: the usage totals and the balance agree with the calls
// made, nothing lost to the kill and nothing applied twice by the bus's redelivery.
jest.setTimeout(120_000);

const API_KEY = 'sk-billing-crash-' + 'b'.repeat(32);
const CALLS = 40;
let dataDir: string;
let fake: FakeProviderServer;
let system: SystemProcess | null = null;

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'svc-billing-crash-'));
  fake = await startFakeOpenAI({ apiKey: API_KEY });
});
afterAll(async () => {
  if (system) await system.kill().catch(() => undefined);
  await fake.close();
  rmSync(dataDir, { recursive: true, force: true });
});

it('bills every model call exactly once across a SIGKILL of billing mid-load', async () => {
  system = await startSystem({ DATA_DIR: dataDir, EGRESS_ALLOW_PRIVATE: 'true', SVC_LAYOUT: 'per-service' });
  const api = client(system.url);
  const owner = await signUp(api, 'BillingCrash');
  const t = { token: owner.accessToken };
  const summary = async () => (await api.get('/api/v1/billing/summary', t)).body.data;
  await eventually(async () => (await summary())?.credits?.balance === 1000, 20_000);
  await api.patch('/api/v1/tenant/settings/llm', { provider: 'openai', model: 'gpt-fake', baseUrl: fake.url, apiKey: API_KEY }, t);
  // Each reply reports 1,500 tokens: 2 credits a call.
  fake.setDefault(() => ({ type: 'text', text: 'billed reply', delayMs: 5, usage: { inputTokens: 1000, outputTokens: 500 } }));

  const sessions: string[] = [];
  for (let i = 0; i < CALLS; i++) sessions.push((await api.post('/api/v1/chat/sessions', { title: `s${i}` }, t)).body.data.id);
  // One after another (a tenant's replies in flight at once are capped), so the calls keep coming through the kill.
  const statuses: number[] = [];
  const post = (i: number) => api.post(`/api/v1/chat/sessions/${sessions[i]}/messages`, { content: `call ${i}` }, t);
  const send = async (from: number, to: number) => {
    for (let i = from; i < to; i++) {
      let res = await post(i);
      // Until the chat service's channel to the restarted billing reconnects, a reservation may be refused (503).
      for (let tries = 0; res.status === 503 && tries < 100; tries++) {
        await new Promise((r) => setTimeout(r, 100));
        res = await post(i);
      }
      statuses.push(res.status);
    }
  };

  // The first half, then the kill while their usage is in flight. While billing is down no call can reserve its
  // credits: it is refused, never started unchecked (decision 58). Then the second half after the restart.
  await send(0, CALLS / 2);
  const killed = await system.killService('billing');
  expect((await post(CALLS / 2)).status).toBe(503);
  await system.restarted('billing', killed);
  await send(CALLS / 2, CALLS);
  expect(statuses).toEqual(Array(CALLS).fill(202));

  // Until the gateway's channel to the restarted billing reconnects, the summary may be a 503 (no data).
  await eventually(async () => ((await summary())?.usage?.calls ?? 0) >= CALLS, 30_000);
  const after = await summary();
  expect(after.usage).toMatchObject({ calls: CALLS, inputTokens: CALLS * 1000, outputTokens: CALLS * 500, credits: CALLS * 2 });
  expect(after.credits.balance).toBe(1000 - CALLS * 2);
  expect(fake.requests.length).toBe(CALLS);
});
