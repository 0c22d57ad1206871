/**
 * Agent runs through the real gateway and services against local fake providers that speak the OpenAI and
 * Anthropic wire protocols over real HTTP (packages/llm/src/testing), configured per tenant with
 * PATCH /tenant/settings/llm as a user would.
 */
import { type EventBus, type Subscription } from '@svc/kit';
import { decodeDomainEvent, TOPICS } from '@svc/contracts';
import { startFakeAnthropic, startFakeOpenAI, echoText, type FakeProviderServer, type FakeRequest } from '@svc/llm/testing';
import { client, createKey, eventually, expectError, signUp, type Account, type Client, type Res } from '../helpers/http';
import { stackBus, startStack, type Stack } from '../helpers/stack';

let stack: Stack;
let api: Client;
let openai: FakeProviderServer;
let anthropic: FakeProviderServer;
const OPENAI_KEY = 'sk-tenant-openai-' + 'o'.repeat(32);
const ANTHROPIC_KEY = 'sk-ant-tenant-' + 'a'.repeat(32);
/** Every response body seen in this file: none may contain a tenant's API key. */
const seen: string[] = [];
/** Every event on the agents topic, as consumers see it. */
const events: Array<{ type: string; data: any }> = [];
let bus: EventBus;
let sub: Subscription;
/** A run started first thing whose provider never answers: its 10 s time budget runs out while the others go on. */
let slow: { t: Tenant; agentId: string; runId: string; goal: string };

beforeAll(async () => {
  openai = await startFakeOpenAI({ apiKey: OPENAI_KEY });
  anthropic = await startFakeAnthropic({ apiKey: ANTHROPIC_KEY });
  stack = await startStack({
    env: {
      EGRESS_ALLOW_PRIVATE: 'true',
      AGENTS_POLL_MS: '50',
      AGENTS_RETRY_BASE_MS: '10',
      AGENTS_LLM_RETRIES: '2',
      AGENTS_STEP_RETRIES: '1',
    },
  });
  const raw = client(stack.url);
  const record =
    (fn: (...args: any[]) => Promise<Res>) =>
    async (...args: any[]) => {
      const res = await fn(...args);
      seen.push(res.text);
      return res;
    };
  api = { ...raw, get: record(raw.get), post: record(raw.post), patch: record(raw.patch), del: record(raw.del) } as Client;
  bus = stackBus(stack, 'test');
  sub = await bus.subscribe({
    group: 'agent-runs-test',
    topics: [TOPICS.agents],
    handler: async (m) => {
      const e = decodeDomainEvent(m.value);
      events.push({ type: e.type, data: e.data?.value });
    },
  });
  const t = await tenant('openai', 'Budget');
  const agentId = await agent(t, { autonomyLevel: 'autonomous', timeBudgetSeconds: 10 });
  openai.script({ type: 'hang' });
  const goal = 'Think for a very long time';
  const runId = (await execute(t, agentId, goal)).id;
  await eventually(async () => requestsFor(openai, goal).length === 1);
  slow = { t, agentId, runId, goal };
});
afterAll(async () => {
  await sub.stop();
  await bus.close();
  await stack.stop();
  await openai.close();
  await anthropic.close();
  expect(seen.length).toBeGreaterThan(20);
  for (const text of seen) {
    expect(text).not.toContain(OPENAI_KEY);
    expect(text).not.toContain(ANTHROPIC_KEY);
  }
});

type Provider = 'openai' | 'openai-compatible' | 'anthropic';

interface Tenant {
  owner: Account;
  token: string;
  projectId: string;
}

/** A tenant whose LLM is one of the fakes, with a project. */
async function tenant(provider: Provider, name = 'Runs'): Promise<Tenant> {
  const owner = await signUp(api, name);
  const settings =
    provider === 'anthropic'
      ? { provider, model: 'claude-fake', baseUrl: anthropic.url, apiKey: ANTHROPIC_KEY }
      : provider === 'openai'
        ? { provider, model: 'gpt-fake', baseUrl: openai.url, apiKey: OPENAI_KEY }
        : { provider, model: 'llama-fake', baseUrl: openai.url, apiKey: OPENAI_KEY };
  expect((await api.patch('/api/v1/tenant/settings/llm', settings, { token: owner.accessToken })).status).toBe(200);
  const project = await api.post(
    '/api/v1/projects',
    { name: `${name} site`, description: 'The old description', language: 'go' },
    { token: owner.accessToken },
  );
  return { owner, token: owner.accessToken, projectId: project.body.data.id };
}

async function agent(t: Tenant, config: Record<string, unknown>, systemPrompt = 'You are a careful project assistant.'): Promise<string> {
  const res = await api.post('/api/v1/agents', { name: 'runner', systemPrompt, config }, { token: t.token });
  expect(res.status).toBe(201);
  return res.body.data.id;
}

async function execute(t: Tenant, agentId: string, goal: string, projectId = t.projectId) {
  const res = await api.post(`/api/v1/agents/${agentId}/execute`, { goal, projectId }, { token: t.token });
  expect(res.status).toBe(202);
  return res.body.data;
}

async function getRun(t: Tenant, agentId: string, runId: string) {
  return (await api.get(`/api/v1/agents/${agentId}/runs/${runId}`, { token: t.token })).body.data;
}

/** Polls the run until its status is one of `statuses`. */
async function until(t: Tenant, agentId: string, runId: string, ...statuses: string[]) {
  let run: any;
  await eventually(async () => {
    run = await getRun(t, agentId, runId);
    return statuses.includes(run.status);
  }, 10_000);
  return run;
}

/** The fake's chat requests for a goal (each request carries the whole conversation). */
function requestsFor(fake: FakeProviderServer, goal: string): FakeRequest[] {
  return fake.requests.filter((r) => r.conversation?.messages.some((m) => m.role === 'user' && m.text === goal));
}

describe('runs on each provider', () => {
  it('manual: one model answer, no tools offered, the system prompt and project context sent, usage recorded (openai-compatible)', async () => {
    const t = await tenant('openai-compatible', 'Manual');
    const agentId = await agent(t, { autonomyLevel: 'manual' }, 'Answer in one sentence.');
    openai.script({
      type: 'tool_calls',
      toolCalls: [{ name: 'update_project', arguments: { description: 'hacked' } }],
      text: 'I would rather not.',
    });
    const goal = 'Summarise the project';
    const queued = await execute(t, agentId, goal);
    expect(queued).toMatchObject({
      agentId,
      projectId: t.projectId,
      goal,
      status: 'queued',
      output: null,
      error: null,
      steps: [],
      startedAt: null,
    });
    const run = await until(t, agentId, queued.id, 'completed', 'failed');
    expect(run).toMatchObject({ status: 'completed', output: 'I would rather not.', error: null });
    expect(run.startedAt).not.toBeNull();
    expect(run.completedAt).not.toBeNull();
    // The model asked for a tool nobody offered it: nothing ran, the project is untouched.
    expect(run.steps).toEqual([expect.objectContaining({ index: 0, type: 'model', status: 'completed', text: 'I would rather not.' })]);
    expect((await api.get(`/api/v1/projects/${t.projectId}`, { token: t.token })).body.data.description).toBe('The old description');
    const [req] = requestsFor(openai, goal);
    expect(req.conversation!.tools).toEqual([]);
    expect(req.conversation!.system).toContain('Answer in one sentence.');
    expect(req.conversation!.system).toContain('Manual site');
    expect(req.conversation!.model).toBe('llama-fake');
    expect(run.usage.inputTokens).toBeGreaterThan(0);
    expect(run.usage).toEqual(run.steps[0].usage);
    expect(req.headers.authorization).toBe(`Bearer ${OPENAI_KEY}`);
  });

  it('autonomous: tool calls run without asking and the run completes with the final answer (openai), events in the outbox order', async () => {
    const t = await tenant('openai', 'Auto');
    const agentId = await agent(t, { autonomyLevel: 'autonomous', model: 'gpt-agent-override' });
    openai.script(
      { type: 'tool_calls', toolCalls: [{ name: 'get_project', arguments: {} }] },
      {
        type: 'tool_calls',
        toolCalls: [{ name: 'update_project', arguments: { description: 'Written by the agent', language: 'rust' } }],
      },
      { type: 'text', text: 'Updated the description.', chunks: 3 },
    );
    const goal = 'Rewrite the description';
    const { id } = await execute(t, agentId, goal);
    const run = await until(t, agentId, id, 'completed', 'failed');
    expect(run.status).toBe('completed');
    expect(run.output).toBe('Updated the description.');
    expect(run.steps.map((s: any) => [s.type, s.toolName ?? null, s.status])).toEqual([
      ['model', null, 'completed'],
      ['tool', 'get_project', 'completed'],
      ['model', null, 'completed'],
      ['tool', 'update_project', 'completed'],
      ['model', null, 'completed'],
    ]);
    expect(run.steps[1].result.project).toMatchObject({ id: t.projectId, description: 'The old description' });
    expect(run.steps[3].arguments).toEqual({ description: 'Written by the agent', language: 'rust' });
    expect((await api.get(`/api/v1/projects/${t.projectId}`, { token: t.token })).body.data).toMatchObject({
      description: 'Written by the agent',
      language: 'rust',
    });
    const reqs = requestsFor(openai, goal);
    expect(reqs).toHaveLength(3);
    expect(reqs[0].conversation!.tools.sort()).toEqual(['get_project', 'list_projects', 'update_project']);
    expect(reqs[0].conversation!.model).toBe('gpt-agent-override');
    // The model sees each tool's result before its next turn.
    expect(reqs[2].conversation!.messages.filter((m) => m.role === 'tool').map((m) => JSON.parse(m.text).project.language)).toEqual([
      'go',
      'rust',
    ]);
    for (const r of reqs) expect(r.headers.authorization).toBe(`Bearer ${OPENAI_KEY}`);
    const usageSum = run.steps.filter((s: any) => s.type === 'model').reduce((n: number, s: any) => n + s.usage.outputTokens, 0);
    expect(run.usage.outputTokens).toBe(usageSum);

    await eventually(async () => events.some((e) => e.type === 'agent.completed' && e.data.runId === id), 5000);
    const mine = events.filter((e) => e.data.runId === id || e.data.sourceId === id);
    expect(mine.map((e) => e.type)).toEqual(['agent.started', 'llm.usage', 'llm.usage', 'llm.usage', 'agent.completed']);
    expect(mine[4].data).toMatchObject({
      status: 'completed',
      output: 'Updated the description.',
      agentId,
      projectId: t.projectId,
      outputTokens: run.usage.outputTokens,
    });
    expect(mine[1].data).toMatchObject({
      source: 'agent_run',
      sourceId: id,
      provider: 'openai',
      model: 'gpt-agent-override',
      keySource: 'tenant',
    });
  });

  it('supervised: read-only tools run, a tool that changes data waits for approval; approve runs it (anthropic)', async () => {
    const t = await tenant('anthropic', 'Supervised');
    const agentId = await agent(t, { autonomyLevel: 'supervised' });
    anthropic.script(
      {
        type: 'tool_calls',
        toolCalls: [
          { name: 'list_projects', arguments: { limit: 5 } },
          { name: 'update_project', arguments: { language: 'python' } },
        ],
      },
      { type: 'text', text: 'Switched to Python.' },
    );
    const goal = 'Move the project to Python';
    const { id } = await execute(t, agentId, goal);
    const waiting = await until(t, agentId, id, 'requires_approval', 'failed', 'completed');
    expect(waiting.status).toBe('requires_approval');
    expect(waiting.steps.map((s: any) => [s.toolName ?? s.type, s.status])).toEqual([
      ['model', 'completed'],
      ['list_projects', 'completed'],
      ['update_project', 'requires_approval'],
    ]);
    expect((await api.get(`/api/v1/projects/${t.projectId}`, { token: t.token })).body.data.language).toBe('go');

    const approved = await api.post(`/api/v1/agents/${agentId}/runs/${id}/approve`, undefined, { token: t.token });
    expect(approved.status).toBe(200);
    expect(['queued', 'running', 'completed']).toContain(approved.body.data.status);
    const run = await until(t, agentId, id, 'completed', 'failed');
    expect(run).toMatchObject({ status: 'completed', output: 'Switched to Python.' });
    expect(run.steps[2]).toMatchObject({ toolName: 'update_project', status: 'completed', result: { project: { language: 'python' } } });
    expect((await api.get(`/api/v1/projects/${t.projectId}`, { token: t.token })).body.data.language).toBe('python');
    const reqs = requestsFor(anthropic, goal);
    expect(reqs).toHaveLength(2);
    for (const r of reqs) expect(r.headers['x-api-key']).toBe(ANTHROPIC_KEY);
    expect(reqs[0].conversation!.model).toBe('claude-fake');

    // Approving again: the run is no longer waiting.
    expectError(await api.post(`/api/v1/agents/${agentId}/runs/${id}/approve`, undefined, { token: t.token }), 409, 'CONFLICT');
    expectError(await api.post(`/api/v1/agents/${agentId}/runs/${id}/reject`, undefined, { token: t.token }), 409, 'CONFLICT');
  });

  it('supervised: reject records the refusal, nothing changes, and the model is told', async () => {
    const t = await tenant('openai', 'Reject');
    const agentId = await agent(t, {});
    openai.script(
      { type: 'tool_calls', toolCalls: [{ name: 'update_project', arguments: { description: 'Something else' } }] },
      { type: 'text', text: 'Understood, left it alone.' },
    );
    const goal = 'Change the description';
    const { id } = await execute(t, agentId, goal);
    await until(t, agentId, id, 'requires_approval');
    const rejected = await api.post(`/api/v1/agents/${agentId}/runs/${id}/reject`, { reason: 'Keep the current text' }, { token: t.token });
    expect(rejected.status).toBe(200);
    const run = await until(t, agentId, id, 'completed', 'failed');
    expect(run).toMatchObject({ status: 'completed', output: 'Understood, left it alone.' });
    expect(run.steps[1]).toMatchObject({
      toolName: 'update_project',
      status: 'rejected',
      result: { error: 'The user rejected this action.', reason: 'Keep the current text' },
    });
    expect((await api.get(`/api/v1/projects/${t.projectId}`, { token: t.token })).body.data.description).toBe('The old description');
    const last = requestsFor(openai, goal).at(-1)!;
    expect(last.conversation!.messages.find((m) => m.role === 'tool')!.text).toContain('rejected');
  });

  it('maxSteps bounds the loop: the last model call is offered no tools, so the run ends with an answer', async () => {
    const t = await tenant('openai', 'Steps');
    const agentId = await agent(t, { autonomyLevel: 'autonomous', maxSteps: 2 });
    openai.script(
      { type: 'tool_calls', toolCalls: [{ name: 'get_project', arguments: {} }] },
      { type: 'tool_calls', toolCalls: [{ name: 'get_project', arguments: {} }], text: 'Out of steps; here is what I have.' },
    );
    const goal = 'Look around a lot';
    const { id } = await execute(t, agentId, goal);
    const run = await until(t, agentId, id, 'completed', 'failed');
    expect(run).toMatchObject({ status: 'completed', output: 'Out of steps; here is what I have.' });
    expect(run.steps.map((s: any) => s.toolName ?? s.type)).toEqual(['model', 'get_project', 'model']);
    expect(requestsFor(openai, goal).map((r) => r.conversation!.tools.length)).toEqual([3, 0]);
  });

  it('a key without projects:write gets no tool that changes data', async () => {
    const t = await tenant('openai', 'Scoped');
    const agentId = await agent(t, { autonomyLevel: 'autonomous' });
    const { key } = await createKey(api, t.token, { scopes: ['agents:write', 'agents:read', 'projects:read'] });
    const goal = 'Look but do not touch';
    const res = await api.post(`/api/v1/agents/${agentId}/execute`, { goal, projectId: t.projectId }, { token: key });
    expect(res.status).toBe(202);
    const run = await until(t, agentId, res.body.data.id, 'completed', 'failed');
    expect(run).toMatchObject({ status: 'completed', output: echoText(goal) });
    expect(requestsFor(openai, goal)[0].conversation!.tools.sort()).toEqual(['get_project', 'list_projects']);
  });
});

describe('provider trouble', () => {
  it('retries a 429 and completes', async () => {
    const t = await tenant('openai', 'RateLimited');
    const agentId = await agent(t, { autonomyLevel: 'manual' });
    openai.script({ type: 'error', status: 429 }, { type: 'text', text: 'After the wait.' });
    const goal = 'Hello after a 429';
    const { id } = await execute(t, agentId, goal);
    const run = await until(t, agentId, id, 'completed', 'failed');
    expect(run).toMatchObject({ status: 'completed', output: 'After the wait.' });
    expect(requestsFor(openai, goal)).toHaveLength(2);
  });

  it('a stream cut in the middle is retried once as a whole step; cut again, the run fails with the reason', async () => {
    const t = await tenant('anthropic', 'Cut');
    const agentId = await agent(t, { autonomyLevel: 'manual' });
    anthropic.script(
      { type: 'cut', afterChunks: 3, text: 'This reply will be cut short by the network' },
      { type: 'text', text: 'Whole reply.' },
    );
    const goal1 = 'Cut once';
    const first = await execute(t, agentId, goal1);
    const ok = await until(t, agentId, first.id, 'completed', 'failed');
    expect(ok).toMatchObject({ status: 'completed', output: 'Whole reply.' });
    // The partial text of the cut attempt is not kept: one model step, the whole reply.
    expect(ok.steps).toHaveLength(1);

    // Cut after the first text (message_start, ping, content_block_start, a delta): a cut before any text would be a
    // failure before the first token, which the model chain retries (or passes to a fallback) itself.
    anthropic.script({ type: 'cut', afterChunks: 4 }, { type: 'cut', afterChunks: 4 });
    const second = await execute(t, agentId, 'Cut twice');
    const failed = await until(t, agentId, second.id, 'completed', 'failed');
    expect(failed.status).toBe('failed');
    expect(failed.error).toMatch(/^llm_(unavailable|protocol): /);
    expect(failed.output).toBeNull();
    expect(requestsFor(anthropic, 'Cut twice')).toHaveLength(2);
  });

  it('a wrong API key fails the run with an auth reason that does not quote the key', async () => {
    const t = await tenant('openai', 'WrongKey');
    await api.patch('/api/v1/tenant/settings/llm', { apiKey: 'sk-wrong-key-1234567890' }, { token: t.token });
    const agentId = await agent(t, { autonomyLevel: 'manual' });
    const { id } = await execute(t, agentId, 'With the wrong key');
    const run = await until(t, agentId, id, 'completed', 'failed');
    expect(run.status).toBe('failed');
    expect(run.error).toMatch(/^llm_auth: /);
    expect(JSON.stringify(run)).not.toContain('sk-wrong-key');
  });
});

describe('cancel', () => {
  it('cancels a running run: the provider call is aborted and the run stays cancelled', async () => {
    const t = await tenant('openai', 'Cancel');
    const agentId = await agent(t, { autonomyLevel: 'autonomous' });
    openai.script({ type: 'hang' });
    const goal = 'Take forever';
    const { id } = await execute(t, agentId, goal);
    await eventually(async () => requestsFor(openai, goal).length === 1);
    expect((await getRun(t, agentId, id)).status).toBe('running');
    const res = await api.post(`/api/v1/agents/${agentId}/runs/${id}/cancel`, undefined, { token: t.token });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ id, status: 'cancelled', error: expect.stringMatching(/^cancelled/) });
    await eventually(async () => requestsFor(openai, goal)[0].aborted);
    expect((await getRun(t, agentId, id)).status).toBe('cancelled');
    expectError(await api.post(`/api/v1/agents/${agentId}/runs/${id}/cancel`, undefined, { token: t.token }), 409, 'CONFLICT');
    expectError(await api.post(`/api/v1/agents/${agentId}/runs/${id}/approve`, undefined, { token: t.token }), 409, 'CONFLICT');
  });

  it('cancels a run waiting for approval, and a finished run cannot be cancelled', async () => {
    const t = await tenant('openai', 'CancelWaiting');
    const agentId = await agent(t, { autonomyLevel: 'supervised' });
    openai.script({ type: 'tool_calls', toolCalls: [{ name: 'update_project', arguments: { language: 'c' } }] });
    const { id } = await execute(t, agentId, 'Wait for me');
    await until(t, agentId, id, 'requires_approval');
    expect((await api.post(`/api/v1/agents/${agentId}/runs/${id}/cancel`, undefined, { token: t.token })).body.data.status).toBe(
      'cancelled',
    );
    expectError(await api.post(`/api/v1/agents/${agentId}/runs/${id}/approve`, undefined, { token: t.token }), 409, 'CONFLICT');

    const done = await execute(t, agentId, 'Quick one');
    await until(t, agentId, done.id, 'completed');
    const late = expectError(
      await api.post(`/api/v1/agents/${agentId}/runs/${done.id}/cancel`, undefined, { token: t.token }),
      409,
      'CONFLICT',
    );
    expect(late.details).toEqual({ status: 'completed' });
  });
});

describe('runs: listing, validation and isolation', () => {
  let t: Tenant;
  let agentId: string;
  beforeAll(async () => {
    t = await tenant('openai-compatible', 'RunList');
    agentId = await agent(t, { autonomyLevel: 'manual' });
  });

  it('lists an agent’s runs newest first with pagination', async () => {
    const ids: string[] = [];
    for (const goal of ['one', 'two', 'three']) ids.push((await execute(t, agentId, goal)).id);
    const page1 = await api.get(`/api/v1/agents/${agentId}/runs?limit=2`, { token: t.token });
    expect(page1.status).toBe(200);
    expect(page1.body.data.map((r: any) => r.id)).toEqual([ids[2], ids[1]]);
    expect(page1.body.meta.pagination.has_more).toBe(true);
    const page2 = await api.get(
      `/api/v1/agents/${agentId}/runs?limit=2&cursor=${encodeURIComponent(page1.body.meta.pagination.next_cursor)}`,
      {
        token: t.token,
      },
    );
    expect(page2.body.data.map((r: any) => r.id)).toEqual([ids[0]]);
    for (const id of ids) await until(t, agentId, id, 'completed');
  });

  it.each([
    ['an empty body', {}],
    ['a missing projectId', { goal: 'do it' }],
    ['a missing goal', { projectId: 'prj_x' }],
    ['a goal of the wrong type', { goal: 42, projectId: 'prj_x' }],
    ['a projectId of the wrong type', { goal: 'x', projectId: ['prj_x'] }],
    ['a blank goal', { goal: '   ', projectId: 'PROJECT' }],
    ['a huge goal', { goal: 'g'.repeat(10_001), projectId: 'PROJECT' }],
    ['an empty projectId', { goal: 'x', projectId: '' }],
    ['an unknown field', { goal: 'x', projectId: 'PROJECT', autonomyLevel: 'autonomous' }],
    ['a null goal', { goal: null, projectId: 'PROJECT' }],
  ])('execute refuses %s with 400', async (_what, body: Record<string, unknown>) => {
    const b = { ...body };
    if (b.projectId === 'PROJECT') b.projectId = t.projectId;
    expectError(await api.post(`/api/v1/agents/${agentId}/execute`, b, { token: t.token }), 400, 'VALIDATION_ERROR');
  });

  it('refuses malformed JSON, bad reject bodies and bad list queries with 400', async () => {
    const raw = await api.request('POST', `/api/v1/agents/${agentId}/execute`, {
      raw: '{"goal": "x",',
      token: t.token,
      headers: { 'content-type': 'application/json' },
    });
    expectError(raw, 400, 'VALIDATION_ERROR');
    expectError(await api.post(`/api/v1/agents/${agentId}/runs/run_x/reject`, { reason: 5 }, { token: t.token }), 400, 'VALIDATION_ERROR');
    expectError(await api.post(`/api/v1/agents/${agentId}/runs/run_x/reject`, { why: 'x' }, { token: t.token }), 400, 'VALIDATION_ERROR');
    expectError(await api.get(`/api/v1/agents/${agentId}/runs?limit=0`, { token: t.token }), 400, 'VALIDATION_ERROR');
    expectError(await api.get(`/api/v1/agents/${agentId}/runs?cursor=nope`, { token: t.token }), 400, 'VALIDATION_ERROR');
  });

  it('answers 404 for unknown agents, runs and projects', async () => {
    const noAgent = expectError(
      await api.post('/api/v1/agents/agt_missing/execute', { goal: 'x', projectId: t.projectId }, { token: t.token }),
      404,
      'RESOURCE_NOT_FOUND',
    );
    expect(noAgent.details).toEqual({ resource: 'agent', id: 'agt_missing' });
    const noProject = expectError(
      await api.post(`/api/v1/agents/${agentId}/execute`, { goal: 'x', projectId: 'prj_missing' }, { token: t.token }),
      404,
      'RESOURCE_NOT_FOUND',
    );
    expect(noProject.details).toEqual({ resource: 'project', id: 'prj_missing' });
    expect(
      expectError(await api.get(`/api/v1/agents/${agentId}/runs/run_missing`, { token: t.token }), 404, 'RESOURCE_NOT_FOUND').details,
    ).toEqual({
      resource: 'run',
      id: 'run_missing',
    });
    expectError(await api.get('/api/v1/agents/agt_missing/runs', { token: t.token }), 404, 'RESOURCE_NOT_FOUND');
    // A run is found only under its own agent.
    const other = await agent(t, { autonomyLevel: 'manual' });
    const run = await execute(t, agentId, 'mine');
    expectError(await api.get(`/api/v1/agents/${other}/runs/${run.id}`, { token: t.token }), 404, 'RESOURCE_NOT_FOUND');
    await until(t, agentId, run.id, 'completed');
  });

  it('another tenant gets 404 for the agent, its runs and its project, and its own project cannot be used by others', async () => {
    const run = await execute(t, agentId, 'private goal');
    await until(t, agentId, run.id, 'completed');
    const other = await tenant('openai-compatible', 'Intruder');
    const otherAgent = await agent(other, { autonomyLevel: 'manual' });
    for (const res of [
      await api.post(`/api/v1/agents/${agentId}/execute`, { goal: 'x', projectId: t.projectId }, { token: other.token }),
      await api.get(`/api/v1/agents/${agentId}/runs`, { token: other.token }),
      await api.get(`/api/v1/agents/${agentId}/runs/${run.id}`, { token: other.token }),
      await api.post(`/api/v1/agents/${agentId}/runs/${run.id}/cancel`, undefined, { token: other.token }),
      await api.post(`/api/v1/agents/${agentId}/runs/${run.id}/approve`, undefined, { token: other.token }),
      await api.post(`/api/v1/agents/${agentId}/runs/${run.id}/reject`, undefined, { token: other.token }),
      await api.get(`/api/v1/agents/${otherAgent}/runs/${run.id}`, { token: other.token }),
    ]) {
      expectError(res, 404, 'RESOURCE_NOT_FOUND');
    }
    // Its own agent on the first tenant's project: the project does not exist for it.
    const cross = expectError(
      await api.post(`/api/v1/agents/${otherAgent}/execute`, { goal: 'x', projectId: t.projectId }, { token: other.token }),
      404,
      'RESOURCE_NOT_FOUND',
    );
    expect(cross.details).toEqual({ resource: 'project', id: t.projectId });
  });

  it('needs agents:write to execute, cancel and approve, agents:read to look', async () => {
    const reader = await createKey(api, t.token, { scopes: ['agents:read'] });
    const run = await execute(t, agentId, 'scoped');
    expectError(
      await api.post(`/api/v1/agents/${agentId}/execute`, { goal: 'x', projectId: t.projectId }, { token: reader.key }),
      403,
      'FORBIDDEN',
    );
    expectError(await api.post(`/api/v1/agents/${agentId}/runs/${run.id}/cancel`, undefined, { token: reader.key }), 403, 'FORBIDDEN');
    expectError(await api.post(`/api/v1/agents/${agentId}/runs/${run.id}/approve`, undefined, { token: reader.key }), 403, 'FORBIDDEN');
    expect((await api.get(`/api/v1/agents/${agentId}/runs/${run.id}`, { token: reader.key })).status).toBe(200);
    expectError(await api.post(`/api/v1/agents/${agentId}/execute`, { goal: 'x', projectId: t.projectId }), 401, 'UNAUTHORIZED');
    await until(t, agentId, run.id, 'completed');
  });

  it('answers 400 llm_not_configured when neither the tenant nor the platform has an LLM', async () => {
    const owner = await signUp(api, 'NoLlm');
    const project = (await api.post('/api/v1/projects', { name: 'p' }, { token: owner.accessToken })).body.data;
    const a = (await api.post('/api/v1/agents', { name: 'a' }, { token: owner.accessToken })).body.data;
    const err = expectError(
      await api.post(`/api/v1/agents/${a.id}/execute`, { goal: 'x', projectId: project.id }, { token: owner.accessToken }),
      400,
      'VALIDATION_ERROR',
    );
    expect(err.details.reason).toBe('llm_not_configured');
    expect((await api.get(`/api/v1/agents/${a.id}/runs`, { token: owner.accessToken })).body.data).toEqual([]);
  });
});

describe('endings', () => {
  it('deleting an agent cancels its unfinished runs (agent.failed, status cancelled)', async () => {
    const t = await tenant('openai', 'DeleteAgent');
    const agentId = await agent(t, { autonomyLevel: 'supervised' });
    openai.script({ type: 'tool_calls', toolCalls: [{ name: 'update_project', arguments: { language: 'zig' } }] });
    const { id } = await execute(t, agentId, 'Wait, then be deleted');
    await until(t, agentId, id, 'requires_approval');
    expect((await api.del(`/api/v1/agents/${agentId}`, { token: t.token })).status).toBe(200);
    await eventually(async () => events.some((e) => e.type === 'agent.failed' && e.data.runId === id), 5000);
    expect(events.find((e) => e.type === 'agent.failed' && e.data.runId === id)!.data).toMatchObject({
      status: 'cancelled',
      error: expect.stringMatching(/agent was deleted/),
    });
    expectError(await api.get(`/api/v1/agents/${agentId}/runs/${id}`, { token: t.token }), 404, 'RESOURCE_NOT_FOUND');
  });

  it('a run whose provider never answers fails when its time budget runs out, and the call is aborted', async () => {
    const { t, agentId, runId, goal } = slow;
    let run: any;
    await eventually(async () => {
      run = await getRun(t, agentId, runId);
      return run.status !== 'running';
    }, 20_000);
    expect(run.status).toBe('failed');
    expect(run.error).toMatch(/^time_budget_exceeded: /);
    expect(Date.parse(run.completedAt) - Date.parse(run.startedAt)).toBeGreaterThanOrEqual(10_000);
    await eventually(async () => requestsFor(openai, goal)[0].aborted);
  });
});
