import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import {
  conversationTokens,
  echoReply,
  estimateTokens,
  startFakeOpenAI,
  type FakeBehaviour,
  type FakeProviderServer,
  type FakeRequest,
} from '@svc/llm/testing';
import { client, createKey, eventually, signUp } from '../helpers/http';
import { startSystem, type SystemProcess } from '../helpers/process';

// Issue 20, 5: SIGKILL of the chat and agents processes (`SVC_LAYOUT=per-service`, the launcher restarts them) while
// model calls stream. Some calls are mid-stream (no usage yet), some were fully answered, usage included, and wait
// for the end of the stream, one was cut by the provider before its usage. After the restart every reservation is
// settled or released well within its TTL (none expires), every request the provider received is billed exactly
// once (one usage debit per request, per reply and run), a call the provider answered is billed its usage, and the
// balance is the grant plus the credits added minus the debits. Before reservations, the chat sweep failed such
// replies without billing them and a taken-over run billed nothing of its cut call. One chat call has had no answer
// yet: chat stored it as sent before its request left, so it is billed its prompt rather than released.
jest.setTimeout(120_000);

const API_KEY = 'sk-reservations-crash-' + 'r'.repeat(30);
const ADMIN = 'admin-token-reservations-crash';
const GRANT = 100_000;
const ADDED = 5_000;
const TTL_MS = 30_000;
let dataDir: string;
let fake: FakeProviderServer;
let system: SystemProcess | null = null;

/** The label of a request: the last user message (a chat message's content, a run's goal). */
const labelOf = (r: FakeRequest) => [...(r.conversation?.messages ?? [])].reverse().find((m) => m.role === 'user')?.text ?? '';
const words = (n: number) => Array.from({ length: n }, (_, i) => `w${i}`).join(' ');
/** When each labelled request reached the provider (the first one of a label). */
const startedAt = new Map<string, number>();
let afterKill = false;

function behaviour(r: FakeRequest): FakeBehaviour {
  const label = labelOf(r);
  if (!startedAt.has(label)) startedAt.set(label, Date.now());
  // After the kills: quick answers (with usage) for the calls the taken-over runs make.
  if (afterKill || label.startsWith('done')) return echoReply(r.conversation!);
  // Streams for about 4 s: killed in the middle, before its usage.
  if (label.startsWith('slow')) return { type: 'text', text: words(100), delayMs: 40 };
  // Answered in full, usage included, then holds the end of the stream until the client is gone.
  if (label.startsWith('held')) return { type: 'text', text: words(8), delayMs: 10, holdEndMs: 60_000 };
  // Received, and nothing sent back yet when the process dies: billed its prompt (the request had left), not released.
  if (label.startsWith('quiet')) return { type: 'hang' };
  // The provider cuts the stream before its usage (a run retries it once: a second call, billed on its own).
  return { type: 'cut', afterChunks: 4 };
}

/** The tenant's ledger entries and reservations, as billing stored them. */
function billingOf(tenantId: string) {
  const db = new Database(join(dataDir, 'billing.db'), { readonly: true });
  try {
    const docs = (table: string) => (db.prepare(`SELECT doc FROM ${table}`).all() as Array<{ doc: string }>).map((r) => JSON.parse(r.doc));
    return {
      entries: docs('ledger').filter((e) => e.tenantId === tenantId) as Array<{
        kind: string;
        credits: number;
        sourceKey: string;
        description: string;
      }>,
      reservations: docs('reservations').filter((r) => r.tenantId === tenantId) as Array<{
        status: string;
        callId: string;
        credits: number;
      }>,
    };
  } finally {
    db.close();
  }
}

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'svc-reservations-crash-'));
  fake = await startFakeOpenAI({ apiKey: API_KEY });
  fake.setDefault(behaviour);
  system = await startSystem({
    DATA_DIR: dataDir,
    SVC_LAYOUT: 'per-service',
    SVC_ADMIN_TOKEN: ADMIN,
    EGRESS_ALLOW_PRIVATE: 'true',
    RATE_LIMIT_MAX: '1000000',
    BILLING_STARTING_GRANT: String(GRANT),
    // A credit a token: a debit is the call's tokens.
    CREDITS_PER_1K_TOKENS: '1000',
    LLM_MAX_TOKENS: '500',
    BILLING_RESERVATION_TTL_MS: String(TTL_MS),
    CHAT_REPLY_LEASE_MS: '1000',
    CHAT_FLUSH_MS: '50',
    CHAT_TENANT_CONCURRENCY: '100',
    AGENTS_TENANT_CONCURRENCY: '100',
    AGENTS_POLL_MS: '100',
    AGENTS_LEASE_MS: '1000',
    AGENTS_RETRY_BASE_MS: '0',
  });
});
afterAll(async () => {
  if (system) await system.kill().catch(() => undefined);
  await fake?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

it('after SIGKILL of chat and agents mid-call, every reservation closes in time and every provider call is billed once', async () => {
  const sys = system!;
  const api = client(sys.url);
  const owner = await signUp(api, 'KillBill');
  const t = { token: owner.accessToken };
  const admin = { headers: { authorization: `Bearer ${ADMIN}` } };
  // Billing knows the tenant once identity's tenant.created reached it.
  await eventually(
    async () => (await api.post(`/api/v1/admin/tenants/${owner.tenantId}/credits`, { delta: ADDED, reason: 'test' }, admin)).status === 200,
  );
  await api.patch('/api/v1/tenant/settings/llm', { provider: 'openai', model: 'gpt-fake', baseUrl: fake.url, apiKey: API_KEY }, t);
  const agent = (await api.post('/api/v1/agents', { name: 'a', systemPrompt: 'p', config: { autonomyLevel: 'manual' } }, t)).body.data.id;
  const project = (await api.post('/api/v1/projects', { name: 'p' }, t)).body.data.id;

  // Label -> the reply's or run's id (the ledger's usage entries name it).
  const sourceOf = new Map<string, string>();
  const chatLabels = ['done-c', 'slow-c1', 'slow-c2', 'held-c1', 'held-c2', 'cut-c', 'quiet-c'];
  const runLabels = ['done-r', 'slow-r1', 'slow-r2', 'held-r1', 'held-r2', 'cut-r'];
  await Promise.all([
    ...chatLabels.map(async (label) => {
      const session = (await api.post('/api/v1/chat/sessions', { title: label }, t)).body.data.id;
      const posted = await api.post(`/api/v1/chat/sessions/${session}/messages`, { content: label }, t);
      expect(posted.status).toBe(202);
      sourceOf.set(label, posted.body.data.responseMessageId);
    }),
    ...runLabels.map(async (label) => {
      const run = await api.post(`/api/v1/agents/${agent}/execute`, { goal: label, projectId: project }, t);
      expect(run.status).toBe(202);
      sourceOf.set(label, run.body.data.id);
    }),
  ]);

  // Every call reached the provider; the slow ones have streamed for a while (stored), the held ones are answered.
  const all = [...chatLabels, ...runLabels];
  await eventually(async () => all.every((l) => Date.now() - (startedAt.get(l) ?? Infinity) >= 1000), 20_000);
  const reserved = (await api.get('/api/v1/billing/summary', t)).body.data.credits.reserved;
  expect(reserved).toBeGreaterThan(0); // the slow and held calls hold theirs

  const chatPid = await sys.killService('chat');
  const agentsPid = await sys.killService('agents');
  afterKill = true;
  const killedAt = Date.now();
  await Promise.all([sys.restarted('chat', chatPid), sys.restarted('agents', agentsPid)]);

  // Every reservation closes well within its TTL: settled by the sweep's or the take-over's usage, not expired.
  await eventually(async () => (await api.get('/api/v1/billing/summary', t)).body.data.credits.reserved === 0, TTL_MS / 2);
  expect(Date.now() - killedAt).toBeLessThan(TTL_MS);
  // Replies and runs have all ended (so no call is still on its way).
  await eventually(async () => {
    const res = await api.get(`/api/v1/agents/${agent}/runs`, t);
    if (res.status !== 200) return false; // agents is still coming back from its SIGKILL (the gateway answers 503)
    const runs = res.body.data as Array<{ status: string }>;
    return runs.length === runLabels.length && runs.every((r) => ['completed', 'failed'].includes(r.status));
  }, 20_000);
  const summary = (await api.get('/api/v1/billing/summary', t)).body.data;
  expect(summary.credits.reserved).toBe(0);

  const calls = fake.requests.filter((r) => r.conversation);
  const { entries, reservations } = billingOf(owner.tenantId);
  const debits = entries.filter((e) => e.kind === 'usage');

  // One reservation per call the provider received, each closed by its usage: none released for a call that was
  // made, none left to expire.
  expect(reservations.map((r) => r.status).sort()).toEqual(calls.map(() => 'settled'));
  expect(new Set(debits.map((d) => d.sourceKey))).toEqual(new Set(reservations.map((r) => `usage:call:${r.callId}`)));

  // Exactly one debit per request, per reply and per run (interrupted, cut and retried calls included).
  const requestsPer = new Map<string, number>();
  for (const r of calls) requestsPer.set(sourceOf.get(labelOf(r))!, (requestsPer.get(sourceOf.get(labelOf(r))!) ?? 0) + 1);
  const debitsPer = new Map<string, number>();
  for (const d of debits) {
    const source = /\((?:chat_reply|agent_run) (\S+)\)$/.exec(d.description)?.[1] ?? d.description;
    debitsPer.set(source, (debitsPer.get(source) ?? 0) + 1);
  }
  expect(Object.fromEntries(debitsPer)).toEqual(Object.fromEntries(requestsPer));
  expect(debits).toHaveLength(calls.length);
  // Each run was interrupted or retried: more calls than runs reached the provider.
  expect(calls.length).toBeGreaterThan(all.length);

  // The calls the provider answered in full before the kill are billed the provider's usage, not an estimate.
  for (const label of ['held-c1', 'held-c2', 'held-r1', 'held-r2']) {
    const request = calls.find((r) => labelOf(r) === label)!;
    const usage = conversationTokens(request.conversation!) + estimateTokens(words(8));
    // (A taken-over run has a second debit: its call after the take-over.)
    const billed = debits.filter((d) => d.description.endsWith(`${sourceOf.get(label)})`)).map((d) => -d.credits);
    expect({ label, billed }).toEqual({ label, billed: expect.arrayContaining([usage]) });
  }

  // The balance is the grant plus the credits added minus what was billed.
  const spent = debits.reduce((n, d) => n - d.credits, 0);
  expect(spent).toBeGreaterThan(0);
  expect(entries.filter((e) => e.kind !== 'usage').map((e) => [e.kind, e.credits])).toEqual(
    expect.arrayContaining([
      ['grant', GRANT],
      ['adjustment', ADDED],
    ]),
  );
  expect(entries.filter((e) => e.kind !== 'usage')).toHaveLength(2);
  expect(summary.credits).toEqual({ balance: GRANT + ADDED - spent, reserved: 0, available: GRANT + ADDED - spent });
});

it("an embeddings call cut by SIGKILL of chat held the key's place, and is billed once, its hold, from its stored record", async () => {
  const sys = system!;
  const api = client(sys.url);
  const owner = await signUp(api, 'KillEmbed');
  const t = { token: owner.accessToken };
  await api.patch('/api/v1/tenant/settings/llm', { provider: 'openai', model: 'gpt-fake', baseUrl: fake.url, apiKey: API_KEY }, t);
  const { key } = await createKey(api, owner.accessToken, { limits: { concurrency: 1 } });
  const embed = (input: string) => api.post('/v1/embeddings', { model: 'gpt-fake', input }, { token: key });
  const embedRequests = () => fake.requests.filter((r) => r.path.endsWith('/embeddings')).length;

  // The provider holds the call until chat dies.
  const before = embedRequests();
  fake.script({ type: 'hang' });
  const held = embed('a text to embed, cut by the kill');
  // Through a gateway, chat (restarted by the test before) and its reservation: patience on a loaded machine.
  await eventually(async () => embedRequests() === before + 1, 20_000);
  // Its record holds the key's one place: a second call is refused before the provider sees it.
  const refused = await embed('second');
  expect(refused.status).toBe(429);
  expect(refused.body.error).toMatchObject({ type: 'rate_limit_error', code: 'key_concurrency' });
  const hold = (await api.get('/api/v1/billing/summary', t)).body.data.credits.reserved;
  expect(hold).toBeGreaterThan(0);

  const chatPid = await sys.killService('chat');
  await sys.restarted('chat', chatPid);
  expect((await held).status).toBe(503);
  // The restarted chat's sweep bills the record once its lease has run out: nothing is left reserved.
  await eventually(async () => (await api.get('/api/v1/billing/summary', t)).body.data.credits.reserved === 0, TTL_MS / 2);
  const { entries, reservations } = billingOf(owner.tenantId);
  // The refused call's hold was given back at once; the cut call's settled by its one debit: its hold (a credit a token).
  expect(reservations.map((r) => r.status).sort()).toEqual(['released', 'settled']);
  const cut = reservations.find((r) => r.status === 'settled')!;
  const debits = entries.filter((e) => e.kind === 'usage');
  expect(debits.map((d) => [d.sourceKey, -d.credits])).toEqual([[`usage:call:${cut.callId}`, hold]]);
  expect(embedRequests()).toBe(before + 1);

  // The place is free again. The gateway's channel to the restarted chat may still be in its reconnect back-off
  // (at most 2 s, answering 503) when the sweep's settle comes quickly: asked again until it is not.
  let next = await embed('after the restart');
  await eventually(async () => {
    if (next.status === 503) next = await embed('after the restart');
    return next.status !== 503;
  }, 10_000);
  expect(next.status).toBe(200);
  expect(next.body.data).toHaveLength(1);
});
