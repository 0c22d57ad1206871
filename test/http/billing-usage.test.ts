/**
 * GET /billing/usage (CONTRACT.md 8): usage from chat replies (two API keys and a session, a session with an agent
 * and project) and agent runs in two projects, through the whole stack with the fake OpenAI provider. Every
 * grouping, by hour and by day, sums to the ledger's usage debits (the summary's totals, and the balance's drop).
 */
import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

let stack: Stack;
let api: Client;
let openai: FakeProviderServer;
const OPENAI_KEY = 'sk-tenant-openai-' + 'u'.repeat(32);
const GRANT = 1_000_000;
const H = 3600_000;
const DAY = 24 * H;
const U = '/api/v1/billing/usage';

interface Tenant {
  owner: Account;
  keyA: { key: string; id: string };
  keyB: { key: string; id: string };
  projects: string[];
  agentId: string;
}
let t: Tenant;
let other: Account;

beforeAll(async () => {
  openai = await startFakeOpenAI({ apiKey: OPENAI_KEY });
  stack = await startStack({
    env: { EGRESS_ALLOW_PRIVATE: 'true', AGENTS_POLL_MS: '50', CHAT_DRAIN_MS: '0', BILLING_STARTING_GRANT: String(GRANT) },
  });
  api = client(stack.url);
  t = await usageOf('Usage');
  other = (await tenantWithLlm('Other')).owner;
  await chat(other.accessToken, (await session(other.accessToken)).id, 'the other tenant asks');
  await settled(other.accessToken);
}, 120_000);
afterAll(async () => {
  await stack?.stop();
  await openai?.close();
});

async function tenantWithLlm(name: string) {
  const owner = await signUp(api, name);
  const llm = { provider: 'openai', model: 'gpt-fake', baseUrl: openai.url, apiKey: OPENAI_KEY };
  expect((await api.patch('/api/v1/tenant/settings/llm', llm, { token: owner.accessToken })).status).toBe(200);
  return { owner };
}

async function session(token: string, body: Record<string, unknown> = {}) {
  const res = await api.post('/api/v1/chat/sessions', body, { token });
  expect(res.status).toBe(201);
  return res.body.data as { id: string };
}

/** Posts a message and waits for its reply to finish. */
async function chat(token: string, sessionId: string, content: string) {
  const res = await api.post(`/api/v1/chat/sessions/${sessionId}/messages`, { content }, { token });
  expect(res.status).toBe(202);
  const id = res.body.data.responseMessageId;
  await eventually(async () => {
    const list = await api.get(`/api/v1/chat/sessions/${sessionId}/messages?limit=100`, { token });
    return list.body.data.find((m: any) => m.id === id)?.status === 'completed';
  }, 15_000);
}

async function run(token: string, agentId: string, projectId: string, goal: string) {
  const res = await api.post(`/api/v1/agents/${agentId}/execute`, { goal, projectId }, { token });
  expect(res.status).toBe(202);
  await eventually(async () => {
    const got = await api.get(`/api/v1/agents/${agentId}/runs/${res.body.data.id}`, { token });
    return got.body.data.status === 'completed';
  }, 15_000);
}

const summary = async (token: string) => (await api.get('/api/v1/billing/summary', { token })).body.data;

/** Every model call has been billed: no reservation is open and the ledger stopped moving. */
async function settled(token: string) {
  let last = -1;
  await eventually(
    async () => {
      const s = await summary(token);
      const done = s.credits.reserved === 0 && s.usage.calls === last;
      last = s.usage.calls;
      return done;
    },
    15_000,
    300,
  );
}

async function usageOf(name: string): Promise<Tenant> {
  const { owner } = await tenantWithLlm(name);
  const token = owner.accessToken;
  const keyA = await createKey(api, token, { name: 'key A' });
  const keyB = await createKey(api, token, { name: 'key B' });
  const projects: string[] = [];
  for (const p of ['one', 'two']) projects.push((await api.post('/api/v1/projects', { name: `${name} ${p}` }, { token })).body.data.id);
  const agentId = (await api.post('/api/v1/agents', { name: 'usage agent', systemPrompt: 'Be brief.', config: {} }, { token })).body.data
    .id;
  // Chat replies: key A twice, key B once, the owner's session once, key B in a session with the agent in project one.
  const plain = (await session(token)).id;
  await chat(keyA.key, plain, 'first question from key A');
  await chat(keyA.key, plain, 'second question from key A');
  await chat(keyB.key, plain, 'a question from key B');
  await chat(token, plain, 'a question from the session');
  await chat(keyB.key, (await session(token, { projectId: projects[0], agentId })).id, 'ask the agent');
  // Agent runs in two projects.
  await run(keyA.key, agentId, projects[0], 'summarise project one');
  await run(token, agentId, projects[1], 'summarise project two');
  await settled(token);
  return { owner, keyA, keyB, projects, agentId };
}

const GROUPS = ['model', 'apiKey', 'project', 'agent'];
const SUBSETS = Array.from({ length: 16 }, (_, mask) => GROUPS.filter((_, i) => mask & (1 << i)));
const dayStart = (ms: number) => ms - (ms % DAY);
const iso = (ms: number) => new Date(ms).toISOString();
const WINDOW = { from: iso(dayStart(Date.now()) - DAY), to: iso(dayStart(Date.now()) + DAY) };

async function usage(token: string, q: Record<string, string>, headers: Record<string, string> = {}) {
  return api.get(`${U}?${new URLSearchParams(q)}`, { token, headers });
}

function totals(rows: any[]) {
  const sum = { calls: 0, inputTokens: 0, outputTokens: 0, credits: 0 };
  for (const r of rows) for (const k of Object.keys(sum) as Array<keyof typeof sum>) sum[k] += r[k];
  return sum;
}

test('every grouping, by hour and by day, sums to the ledger’s usage debits', async () => {
  const token = t.owner.accessToken;
  const s = await summary(token);
  const ledger = { calls: s.usage.calls, inputTokens: s.usage.inputTokens, outputTokens: s.usage.outputTokens, credits: s.usage.credits };
  expect(ledger.calls).toBeGreaterThanOrEqual(7); // 5 replies and at least one call per run
  expect(ledger.credits).toBe(GRANT - s.credits.balance); // the only debits are the usage entries
  for (const granularity of ['hour', 'day'])
    for (const groupBy of SUBSETS) {
      const res = await usage(token, { ...WINDOW, granularity, groupBy: groupBy.join(',') });
      expect(res.status).toBe(200);
      const rows = res.body.data as any[];
      expect({ granularity, groupBy, ...totals(rows) }).toEqual({ granularity, groupBy, ...ledger });
      const unit = granularity === 'hour' ? H : DAY;
      const keys = new Set<string>();
      for (const r of rows) {
        expect(Date.parse(r.start) % unit).toBe(0);
        expect(r.calls).toBeGreaterThan(0); // empty buckets are left out
        // Only the grouped fields are present, and each (bucket, group) has one row.
        expect(Object.keys(r).sort()).toEqual(
          ['start', 'calls', 'inputTokens', 'outputTokens', 'credits', ...groupBy.map((g) => (g === 'model' ? g : `${g}Id`))].sort(),
        );
        const key = JSON.stringify([r.start, r.model, r.apiKeyId, r.projectId, r.agentId]);
        expect(keys.has(key)).toBe(false);
        keys.add(key);
      }
    }
});

test('groups name the model, the keys, the projects and the agent of each call', async () => {
  const token = t.owner.accessToken;
  const by = async (groupBy: string) => {
    const rows = (await usage(token, { ...WINDOW, granularity: 'day', groupBy })).body.data as any[];
    const calls = new Map<string | null, number>();
    for (const r of rows) {
      const field = groupBy === 'model' ? 'model' : `${groupBy}Id`;
      calls.set(r[field], (calls.get(r[field]) ?? 0) + r.calls);
    }
    return calls;
  };
  expect([...(await by('model')).keys()]).toEqual(['gpt-fake']);
  const keys = await by('apiKey');
  expect(keys.get(t.keyB.id)).toBe(2); // two replies; key A also ran an agent (one or more calls)
  expect(keys.get(t.keyA.id)).toBeGreaterThanOrEqual(3);
  expect(keys.get(null)).toBeGreaterThanOrEqual(2); // the owner's session: a reply and a run
  expect(new Set(keys.keys())).toEqual(new Set([t.keyA.id, t.keyB.id, null]));
  const projects = await by('project');
  expect(new Set(projects.keys())).toEqual(new Set([null, ...t.projects]));
  expect(projects.get(null)).toBe(4); // the four replies in the session without a project
  const agents = await by('agent');
  expect(new Set(agents.keys())).toEqual(new Set([null, t.agentId]));
  expect(agents.get(null)).toBe(4);
});

test('buckets: hours add up to their day, a window ends before `to` and starts at `from`', async () => {
  const token = t.owner.accessToken;
  const hours = (await usage(token, { ...WINDOW, granularity: 'hour' })).body.data as any[];
  const days = (await usage(token, { ...WINDOW, granularity: 'day' })).body.data as any[];
  for (const d of days) {
    const inDay = hours.filter((h) => Date.parse(h.start) >= Date.parse(d.start) && Date.parse(h.start) < Date.parse(d.start) + DAY);
    expect(totals(inDay)).toEqual(totals([d]));
  }
  const first = Date.parse(hours[0].start);
  // `to` is exclusive: a window ending where the first hour with usage starts has none.
  const before = await usage(token, { from: WINDOW.from, to: iso(first), granularity: 'hour' });
  expect(before.status).toBe(200);
  expect(before.body.data).toEqual([]);
  // `from` is inclusive: the window of that hour alone is that hour's row.
  expect((await usage(token, { from: iso(first), to: iso(first + H), granularity: 'hour' })).body.data).toEqual([hours[0]]);
});

test('Accept: text/csv gives the same rows, every column, absent ones empty', async () => {
  const token = t.owner.accessToken;
  const q = { ...WINDOW, granularity: 'hour', groupBy: 'apiKey,project' };
  const json = (await usage(token, q)).body.data as any[];
  const res = await usage(token, q, { accept: 'text/csv' });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/csv/);
  const lines = res.text.split('\r\n');
  expect(lines.pop()).toBe('');
  expect(lines[0]).toBe('start,model,apiKeyId,projectId,agentId,calls,inputTokens,outputTokens,credits');
  const cols = lines[0].split(',');
  expect(lines.slice(1)).toEqual(json.map((r) => cols.map((c) => (r[c] === null || r[c] === undefined ? '' : String(r[c]))).join(',')));
  expect(lines.length - 1).toBe(json.length);
});

test('bad parameters: 400 naming the fields', async () => {
  const token = t.owner.accessToken;
  const fields = async (q: Record<string, string>) =>
    expectError(await usage(token, q), 400, 'VALIDATION_ERROR').details.fields.map((f: any) => f.field);
  expect(await fields({ to: WINDOW.to })).toContain('from');
  expect(await fields({ from: 'last tuesday', to: WINDOW.to })).toEqual(['from']);
  expect(await fields({ from: WINDOW.to, to: WINDOW.from })).toEqual(['to']);
  expect(await fields({ from: '2024-01-01T00:00:00Z', to: '2025-01-02T00:00:00Z' })).toEqual(['to']);
  expect(await fields({ ...WINDOW, groupBy: 'model,tenant' })).toEqual(['groupBy']);
  expect((await fields({ ...WINDOW, granularity: 'week' })).join()).toMatch(/granularity/);
});

test('a tenant sees only its own usage', async () => {
  const rows = (await usage(other.accessToken, { ...WINDOW, groupBy: 'apiKey,project,agent' })).body.data as any[];
  const s = await summary(other.accessToken);
  expect(totals(rows)).toEqual({
    calls: s.usage.calls,
    inputTokens: s.usage.inputTokens,
    outputTokens: s.usage.outputTokens,
    credits: s.usage.credits,
  });
  expect(totals(rows).calls).toBe(1);
  expect(rows.map((r) => [r.apiKeyId, r.projectId, r.agentId])).toEqual([[null, null, null]]);
});

test('API keys: billing:read is needed when the key has a scope list', async () => {
  const token = t.owner.accessToken;
  const without = await createKey(api, token, { scopes: ['agents:read'] });
  const withScope = await createKey(api, token, { scopes: ['billing:read'] });
  const denied = expectError(await usage(without.key, WINDOW), 403, 'FORBIDDEN');
  expect(denied.details.reason).toBe('missing_scope');
  expect((await usage(withScope.key, WINDOW)).status).toBe(200);
  expect((await usage(t.keyA.key, WINDOW)).status).toBe(200); // unscoped
});
