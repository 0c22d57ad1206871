/**
 * MCP servers as agent tools (CONTRACT.md 11), through the real gateway and services: a real MCP server built with
 * the official SDK in this test (test/helpers/mcp-server.ts) and the fake OpenAI provider scripting tool calls.
 */
import { startFakeOpenAI, type FakeProviderServer, type FakeRequest } from '@svc/llm/testing';
import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { client, createKey, eventually, expectError, signUp, type Account, type Client, type Res } from '../helpers/http';
import { startTestMcpServer, type TestMcpServer } from '../helpers/mcp-server';
import { startStack, type Stack } from '../helpers/stack';

let stack: Stack;
let api: Client;
let openai: FakeProviderServer;
let mcp: TestMcpServer;
const OPENAI_KEY = 'sk-tenant-openai-' + 'm'.repeat(32);
const BEARER = 'mcp-bearer-' + 'z'.repeat(40);
/** Every response body seen in this file: none may contain the bearer token. */
const seen: string[] = [];

beforeAll(async () => {
  openai = await startFakeOpenAI({ apiKey: OPENAI_KEY });
  mcp = await startTestMcpServer();
  stack = await startStack({
    env: { EGRESS_ALLOW_PRIVATE: 'true', AGENTS_POLL_MS: '50', AGENTS_RETRY_BASE_MS: '10', MCP_CALL_TIMEOUT_S: '1' },
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
});

afterAll(async () => {
  await stack.stop();
  await openai.close();
  await mcp.close();
  expect(seen.length).toBeGreaterThan(10);
  for (const text of seen) expect(text).not.toContain(BEARER);
});

interface Tenant {
  owner: Account;
  token: string;
  projectId: string;
  serverId: string;
}

async function tenant(name: string): Promise<Tenant> {
  const owner = await signUp(api, name);
  const token = owner.accessToken;
  const settings = { provider: 'openai', model: 'gpt-fake', baseUrl: openai.url, apiKey: OPENAI_KEY };
  expect((await api.patch('/api/v1/tenant/settings/llm', settings, { token })).status).toBe(200);
  const project = await api.post('/api/v1/projects', { name: `${name} site` }, { token });
  expect((await api.post('/api/v1/secrets', { name: 'MCP_TOKEN', value: BEARER }, { token })).status).toBe(201);
  const server = await api.post(
    '/api/v1/mcp-servers',
    { name: 'notes', url: mcp.url, auth: { type: 'bearer', secret: 'MCP_TOKEN' } },
    { token },
  );
  expect(server.status).toBe(201);
  return { owner, token, projectId: project.body.data.id, serverId: server.body.data.id };
}

async function agent(t: Tenant, autonomyLevel: string, allow: string[]): Promise<string> {
  const res = await api.post(
    '/api/v1/agents',
    { name: 'tool user', config: { autonomyLevel, tools: [{ serverId: t.serverId, allow }] } },
    { token: t.token },
  );
  expect(res.status).toBe(201);
  expect(res.body.data.config.tools).toEqual([{ serverId: t.serverId, allow }]);
  return res.body.data.id;
}

async function execute(t: Tenant, agentId: string, goal: string) {
  const res = await api.post(`/api/v1/agents/${agentId}/execute`, { goal, projectId: t.projectId }, { token: t.token });
  expect(res.status).toBe(202);
  return res.body.data.id as string;
}

async function until(t: Tenant, agentId: string, runId: string, ...statuses: string[]) {
  let run: any;
  await eventually(async () => {
    run = (await api.get(`/api/v1/agents/${agentId}/runs/${runId}`, { token: t.token })).body.data;
    return statuses.includes(run.status);
  }, 15_000);
  return run;
}

function requestsFor(goal: string): FakeRequest[] {
  return openai.requests.filter((r) => r.conversation?.messages.some((m) => m.role === 'user' && m.text === goal));
}

const toolCalls = (...calls: Array<[string, Record<string, unknown>]>) => ({
  type: 'tool_calls' as const,
  toolCalls: calls.map(([name, args]) => ({ name, arguments: args })),
});

describe('registration', () => {
  it('connects, lists the tools with schemas and readOnly, sends the bearer secret; GET, PATCH, refresh, DELETE', async () => {
    const t = await tenant('Registry');
    const got = await api.get(`/api/v1/mcp-servers/${t.serverId}`, { token: t.token });
    expect(got.status).toBe(200);
    const s = got.body.data;
    expect(s).toMatchObject({ name: 'notes', url: mcp.url, auth: { type: 'bearer', secret: 'MCP_TOKEN' }, status: 'ready', error: null });
    const byName = Object.fromEntries(s.tools.map((x: any) => [x.name, x]));
    expect(Object.keys(byName).sort()).toEqual(['admin_reset', 'lookup', 'slow', 'write_note']);
    expect(byName.lookup).toMatchObject({ description: 'Looks a word up', readOnly: true });
    expect(byName.lookup.inputSchema).toMatchObject({ type: 'object', properties: { q: { type: 'string' } }, required: ['q'] });
    expect(byName.write_note.readOnly).toBe(false);
    // The token reached the server, taken from the secret.
    expect(mcp.authorizations).toContain(`Bearer ${BEARER}`);

    const list = await api.get('/api/v1/mcp-servers', { token: t.token });
    expect(list.body.data.map((x: any) => x.id)).toEqual([t.serverId]);
    const renamed = await api.patch(`/api/v1/mcp-servers/${t.serverId}`, { name: 'notes v2' }, { token: t.token });
    expect(renamed.status).toBe(200);
    expect(renamed.body.data.name).toBe('notes v2');
    const refreshed = await api.post(`/api/v1/mcp-servers/${t.serverId}/refresh`, undefined, { token: t.token });
    expect(refreshed.status).toBe(200);
    expect(refreshed.body.data.status).toBe('ready');

    // Another tenant's server is unknown.
    const other = await signUp(api, 'Other');
    expectError(await api.get(`/api/v1/mcp-servers/${t.serverId}`, { token: other.accessToken }), 404, 'RESOURCE_NOT_FOUND');
    expectError(await api.del(`/api/v1/mcp-servers/${t.serverId}`, { token: other.accessToken }), 404, 'RESOURCE_NOT_FOUND');
    // ...and cannot be granted to the other tenant's agent.
    expectError(
      await api.post(
        '/api/v1/agents',
        { name: 'x', config: { tools: [{ serverId: t.serverId, allow: ['lookup'] }] } },
        { token: other.accessToken },
      ),
      400,
      'VALIDATION_ERROR',
    );

    expect((await api.del(`/api/v1/mcp-servers/${t.serverId}`, { token: t.token })).status).toBe(200);
    expectError(await api.get(`/api/v1/mcp-servers/${t.serverId}`, { token: t.token }), 404, 'RESOURCE_NOT_FOUND');
  });

  it('an address the egress guard refuses is 400; an unreachable server is 201 with status error; a missing secret is 400', async () => {
    const owner = await signUp(api, 'Egress');
    const token = owner.accessToken;
    const refused = await api.post('/api/v1/mcp-servers', { name: 'meta', url: 'http://169.254.169.254/mcp' }, { token });
    expectError(refused, 400, 'VALIDATION_ERROR');
    expect(refused.body.error.details.fields[0].field).toBe('url');
    expectError(await api.post('/api/v1/mcp-servers', { name: 'f', url: 'file:///etc/passwd' }, { token }), 400, 'VALIDATION_ERROR');

    const dead = await api.post('/api/v1/mcp-servers', { name: 'dead', url: 'http://127.0.0.1:9/mcp' }, { token });
    expect(dead.status).toBe(201);
    expect(dead.body.data).toMatchObject({ status: 'error', tools: [] });
    expect(dead.body.data.error).toEqual(expect.any(String));

    const noSecret = await api.post(
      '/api/v1/mcp-servers',
      { name: 'x', url: mcp.url, auth: { type: 'bearer', secret: 'nope' } },
      { token },
    );
    expectError(noSecret, 400, 'VALIDATION_ERROR');
  });
});

describe('agents calling MCP tools', () => {
  let t: Tenant;
  beforeAll(async () => {
    t = await tenant('Tools');
  });

  it('autonomous: allowed tools run, the step records result and durationMs; a hanging call fails its step on the timeout and the run goes on', async () => {
    const agentId = await agent(t, 'autonomous', ['lookup', 'write_note', 'slow']);
    const goal = 'Look up and write, autonomously';
    openai.script(toolCalls(['lookup', { q: 'otter' }], ['write_note', { text: 'otters hold hands' }]), toolCalls(['slow', {}]), {
      type: 'text',
      text: 'All done.',
    });
    const before = mcp.calls.length;
    const run = await until(t, agentId, await execute(t, agentId, goal), 'completed', 'failed');
    expect(run.status).toBe('completed');
    expect(run.output).toBe('All done.');
    const steps = run.steps.filter((s: any) => s.type === 'tool_call');
    expect(steps.map((s: any) => [s.tool, s.status, s.serverId])).toEqual([
      ['lookup', 'completed', t.serverId],
      ['write_note', 'completed', t.serverId],
      ['slow', 'failed', t.serverId],
    ]);
    expect(steps[0]).toMatchObject({
      arguments: { q: 'otter' },
      error: null,
      result: { content: [{ type: 'text', text: 'definition of otter' }] },
    });
    expect(steps[0].durationMs).toEqual(expect.any(Number));
    expect(steps[2].error).toMatch(/slow.*timeout/);
    expect(steps[2].durationMs).toBeGreaterThanOrEqual(900);
    expect(mcp.calls.slice(before).map((c) => c.tool)).toEqual(['lookup', 'write_note', 'slow']);
    // Only the allowed tools were offered; the model saw each result (and the timeout) before its next turn.
    const reqs = requestsFor(goal);
    expect(reqs[0].conversation!.tools).toEqual(expect.arrayContaining(['lookup', 'write_note', 'slow']));
    expect(reqs[0].conversation!.tools).not.toContain('admin_reset');
    expect(
      reqs[2]
        .conversation!.messages.filter((m) => m.role === 'tool')
        .map((m) => m.text)
        .join('\n'),
    ).toContain('timeout');

    // The worker went on: another run of the same tenant completes.
    openai.script({ type: 'text', text: 'Still here.' });
    const next = await until(t, agentId, await execute(t, agentId, 'Are you there?'), 'completed', 'failed');
    expect(next.output).toBe('Still here.');
  });

  it('a tool not on the allowlist, or arguments failing its schema, is a failed step naming it; the server never sees the call', async () => {
    const agentId = await agent(t, 'autonomous', ['lookup']);
    const goal = 'Try what is not allowed';
    openai.script(toolCalls(['admin_reset', {}], ['lookup', { q: 5 }], ['lookup', { q: 'ok', extra: 1 }]), {
      type: 'text',
      text: 'Refused.',
    });
    const before = mcp.calls.length;
    const run = await until(t, agentId, await execute(t, agentId, goal), 'completed', 'failed');
    expect(run.status).toBe('completed');
    const steps = run.steps.filter((s: any) => s.type === 'tool_call');
    expect(steps.map((s: any) => [s.tool, s.status])).toEqual([
      ['admin_reset', 'failed'],
      ['lookup', 'failed'],
      ['lookup', 'completed'],
    ]);
    expect(steps[0].error).toContain('admin_reset');
    expect(steps[0].error).toMatch(/not_allowed/);
    expect(steps[0].durationMs).toBeNull();
    expect(steps[1].error).toMatch(/invalid_arguments.*lookup/);
    // Only the valid call reached the server (extra properties are the schema's business: the SDK's zod object strips them).
    expect(mcp.calls.slice(before)).toEqual([{ tool: 'lookup', arguments: { q: 'ok' } }]);
    expect(requestsFor(goal)[0].conversation!.tools).not.toContain('admin_reset');
  });

  it('supervised: the read-only tool runs without asking; the changing one waits; approve runs it, reject fails its step', async () => {
    const agentId = await agent(t, 'supervised', ['lookup', 'write_note']);
    const goal = 'Supervised notes';
    openai.script(
      toolCalls(['lookup', { q: 'heron' }], ['write_note', { text: 'approved note' }]),
      toolCalls(['write_note', { text: 'rejected note' }]),
      { type: 'text', text: 'Finished.' },
    );
    const before = mcp.calls.length;
    const runId = await execute(t, agentId, goal);
    let run = await until(t, agentId, runId, 'requires_approval', 'failed');
    expect(run.status).toBe('requires_approval');
    expect(run.steps.filter((s: any) => s.type === 'tool_call').map((s: any) => [s.tool, s.status])).toEqual([
      ['lookup', 'completed'],
      ['write_note', 'requires_approval'],
    ]);
    expect(mcp.calls.slice(before).map((c) => c.tool)).toEqual(['lookup']);

    expect((await api.post(`/api/v1/agents/${agentId}/runs/${runId}/approve`, undefined, { token: t.token })).status).toBe(200);
    run = await until(t, agentId, runId, 'requires_approval', 'failed');
    expect(mcp.calls.slice(before).map((c) => c.arguments.text ?? c.tool)).toEqual(['lookup', 'approved note']);

    expect((await api.post(`/api/v1/agents/${agentId}/runs/${runId}/reject`, { reason: 'no' }, { token: t.token })).status).toBe(200);
    run = await until(t, agentId, runId, 'completed', 'failed');
    expect(run.status).toBe('completed');
    const steps = run.steps.filter((s: any) => s.type === 'tool_call');
    expect(steps.map((s: any) => [s.tool, s.status])).toEqual([
      ['lookup', 'completed'],
      ['write_note', 'completed'],
      ['write_note', 'rejected'],
    ]);
    expect(steps[2].error).toMatch(/rejected/);
    expect(mcp.notes).not.toContain('rejected note');
    expect(mcp.calls.slice(before)).toHaveLength(2);
  });

  it('manual: no MCP tool is offered', async () => {
    const agentId = await agent(t, 'manual', ['lookup']);
    const goal = 'Manual answer';
    openai.script({ type: 'text', text: 'Just text.' });
    await until(t, agentId, await execute(t, agentId, goal), 'completed');
    expect(requestsFor(goal)[0].conversation!.tools).toEqual([]);
  });
});

describe('/mcp: the platform as an MCP server', () => {
  let t: Tenant;
  const open: McpClient[] = [];
  beforeAll(async () => {
    t = await tenant('Platform');
  });
  afterAll(async () => {
    for (const c of open) await c.close();
  });

  async function connect(key: string): Promise<McpClient> {
    const c = new McpClient({ name: 'test-client', version: '1.0.0' });
    await c.connect(
      new StreamableHTTPClientTransport(new URL(`${stack.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${key}` } } }),
    );
    open.push(c);
    return c;
  }

  it('an unscoped key: every tool; run_agent completes a run against the fake LLM; get_run reads it', async () => {
    const { key } = await createKey(api, t.token);
    const c = await connect(key);
    const tools = (await c.listTools()).tools;
    expect(tools.map((x) => x.name).sort()).toEqual(['get_project', 'get_run', 'list_agents', 'list_projects', 'run_agent']);
    expect(tools.find((x) => x.name === 'list_projects')!.annotations?.readOnlyHint).toBe(true);

    const projects = (await c.callTool({ name: 'list_projects', arguments: {} })) as any;
    expect(projects.structuredContent.projects.map((p: any) => p.id)).toEqual([t.projectId]);
    const agentId = (await api.post('/api/v1/agents', { name: 'mcp driven', config: { autonomyLevel: 'autonomous' } }, { token: t.token }))
      .body.data.id;
    const listed = (await c.callTool({ name: 'list_agents', arguments: {} })) as any;
    expect(listed.structuredContent.agents.map((a: any) => a.id)).toContain(agentId);

    openai.script({ type: 'text', text: 'Answered over MCP.' });
    const ran = (await c.callTool({ name: 'run_agent', arguments: { agentId, projectId: t.projectId, goal: 'Drive me over MCP' } })) as any;
    expect(ran.isError).toBeFalsy();
    expect(ran.structuredContent).toMatchObject({ agentId, status: 'completed', output: 'Answered over MCP.', error: null });
    expect(JSON.parse(ran.content[0].text).runId).toBe(ran.structuredContent.runId);

    const got = (await c.callTool({ name: 'get_run', arguments: { agentId, runId: ran.structuredContent.runId } })) as any;
    expect(got.structuredContent.run).toMatchObject({ id: ran.structuredContent.runId, status: 'completed', goal: 'Drive me over MCP' });
    // The REST API shows the same run.
    const rest = await api.get(`/api/v1/agents/${agentId}/runs/${ran.structuredContent.runId}`, { token: t.token });
    expect(rest.body.data.output).toBe('Answered over MCP.');

    // An unknown id is the tool's error, as the REST API's 404.
    const missing = (await c.callTool({ name: 'get_project', arguments: { projectId: 'prj_doesnotexist' } })) as any;
    expect(missing.isError).toBe(true);
    expect(missing.content[0].text).toContain('RESOURCE_NOT_FOUND');
  });

  it('run_agent answers with the run id and requires_approval when a tool call waits for approval', async () => {
    const { key } = await createKey(api, t.token);
    const c = await connect(key);
    const agentId = await agent(t, 'supervised', ['write_note']);
    openai.script(toolCalls(['write_note', { text: 'needs approval' }]));
    const ran = (await c.callTool({
      name: 'run_agent',
      arguments: { agentId, projectId: t.projectId, goal: 'Write a note over MCP' },
    })) as any;
    expect(ran.structuredContent).toMatchObject({ agentId, status: 'requires_approval', output: null });
    expect(ran.structuredContent.runId).toMatch(/^run_/);
  });

  it("a key's scopes choose the tools: the others are absent from tools/list and calling one is a JSON-RPC error", async () => {
    const { key } = await createKey(api, t.token, { scopes: ['projects:read', 'agents:read'] });
    const c = await connect(key);
    expect((await c.listTools()).tools.map((x) => x.name).sort()).toEqual(['get_project', 'get_run', 'list_agents', 'list_projects']);
    const before = openai.requests.length;
    await expect(c.callTool({ name: 'run_agent', arguments: { agentId: 'agt_x', projectId: t.projectId, goal: 'no' } })).rejects.toThrow(
      /agents:write/,
    );
    expect(openai.requests.length).toBe(before);

    const projectsOnly = await connect((await createKey(api, t.token, { scopes: ['projects:read'] })).key);
    expect((await projectsOnly.listTools()).tools.map((x) => x.name).sort()).toEqual(['get_project', 'list_projects']);
    await expect(projectsOnly.callTool({ name: 'list_agents', arguments: {} })).rejects.toThrow(/agents:read/);
    // Bad arguments are a JSON-RPC error too.
    await expect(projectsOnly.callTool({ name: 'get_project', arguments: { id: 1 } })).rejects.toThrow(/Invalid arguments/);
  });

  it('a user token, no credential or a wrong key: 401', async () => {
    const init = {
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '1' } },
    };
    const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
    const user = await fetch(`${stack.url}/mcp`, {
      method: 'POST',
      headers: { ...headers, authorization: `Bearer ${t.token}` },
      body: JSON.stringify(init),
    });
    expect(user.status).toBe(401);
    const none = await fetch(`${stack.url}/mcp`, { method: 'POST', headers, body: JSON.stringify(init) });
    expect(none.status).toBe(401);
    const wrong = await fetch(`${stack.url}/mcp`, {
      method: 'POST',
      headers: { ...headers, authorization: 'Bearer svc_sdk_' + 'x'.repeat(43) },
      body: JSON.stringify(init),
    });
    expect(wrong.status).toBe(401);
    await expect(connect(t.token)).rejects.toThrow();
  });
});
