import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { agentsV1 } from '@svc/proto';
import type { GatewayDeps } from '../deps';
import { assertKeyTokens } from '../lib/key-usage';
import { pageOf, route } from '../lib/route';
import { IdParams, Nullable, Obj, PageQuery, Str, Timestamp } from '../schemas';

const AutonomyLevel = Type.Union(
  ['manual', 'supervised', 'autonomous'].map((l) => Type.Literal(l)),
  {
    description: 'manual: one model answer, no tools; supervised: tool calls that change data wait for approval; autonomous: tools run',
  },
);

const ConfigFields = {
  autonomyLevel: AutonomyLevel,
  maxSteps: Type.Integer({ minimum: 1, maximum: 50, description: 'model calls per run; the last one is offered no tools' }),
  timeBudgetSeconds: Type.Integer({ minimum: 10, maximum: 3600, description: 'running time per run (waiting for approval excluded)' }),
  model: Str(1, 200, { description: "overrides the tenant's model" }),
  temperature: Type.Number({ minimum: 0, maximum: 2 }),
  tools: Type.Array(
    Obj({
      serverId: Str(1, 100, { description: 'One of your MCP servers' }),
      allow: Type.Array(Str(1, 128), { minItems: 1, maxItems: 100, description: "Exact names of the server's tools the agent may call" }),
    }),
    { maxItems: 20, description: 'MCP tools the agent may call; only these are offered to the model (manual agents: none)' },
  ),
};

const AgentConfig = Obj({
  autonomyLevel: AutonomyLevel,
  maxSteps: Type.Integer(),
  timeBudgetSeconds: Type.Integer(),
  model: Nullable(Type.String()),
  temperature: Nullable(Type.Number()),
  tools: Type.Array(Obj({ serverId: Type.String(), allow: Type.Array(Type.String()) })),
});

const Agent = Obj({
  id: Type.String(),
  name: Type.String(),
  systemPrompt: Type.String(),
  config: AgentConfig,
  createdAt: Timestamp,
  updatedAt: Timestamp,
});

const Usage = Obj({ inputTokens: Type.Integer(), outputTokens: Type.Integer() });

const RunStep = Type.Object(
  {
    index: Type.Integer(),
    type: Type.Union([Type.Literal('model'), Type.Literal('tool'), Type.Literal('tool_call')], {
      description: "model; tool: a built-in tool; tool_call: an MCP server's tool",
    }),
    status: Type.String({ description: 'model: completed; tool: pending, requires_approval, approved, completed, failed, rejected' }),
    startedAt: Timestamp,
    completedAt: Nullable(Timestamp),
    text: Type.Optional(Type.String({ description: 'model: the text it produced' })),
    usage: Type.Optional(Usage),
    model: Type.Optional(
      Type.String({ description: "model: the model that served the call (a fallback's when the main model failed before answering)" }),
    ),
    toolName: Type.Optional(Type.String()),
    toolCallId: Type.Optional(Type.String()),
    arguments: Type.Optional(Type.Unknown({ description: 'tool: the arguments the model gave' })),
    result: Type.Optional(Type.Unknown({ description: 'tool: what the tool returned, or {error}; tool_call: the MCP result, or null' })),
    serverId: Type.Optional(Type.String({ description: 'tool_call: the MCP server' })),
    tool: Type.Optional(Type.String({ description: "tool_call: the MCP tool's own name" })),
    error: Type.Optional(Nullable(Type.String({ description: 'tool_call: why the call was refused or failed; null when it succeeded' }))),
    durationMs: Type.Optional(Nullable(Type.Integer({ description: 'tool_call: how long the server took; null when it was not called' }))),
  },
  { additionalProperties: false },
);

const Run = Obj({
  id: Type.String(),
  agentId: Type.String(),
  projectId: Type.String(),
  goal: Type.String(),
  status: Type.Union(['queued', 'running', 'requires_approval', 'completed', 'failed', 'cancelled'].map((s) => Type.Literal(s))),
  output: Nullable(Type.String()),
  error: Nullable(Type.String({ description: 'why the run failed: a reason code, a colon, then a message' })),
  steps: Type.Array(RunStep),
  usage: Usage,
  createdAt: Timestamp,
  startedAt: Nullable(Timestamp),
  completedAt: Nullable(Timestamp),
});

const RunParams = Obj({ id: Str(1, 100), run_id: Str(1, 100) });

function parseJson(text: string): unknown {
  return text === '' ? undefined : JSON.parse(text);
}

function stepView(s: agentsV1.RunStep) {
  const base = { index: s.index, type: s.type, status: s.status, startedAt: s.startedAt, completedAt: s.completedAt || null };
  if (s.type === 'model')
    return { ...base, text: s.text, usage: s.usage ?? { inputTokens: 0, outputTokens: 0 }, ...(s.model ? { model: s.model } : {}) };
  if (s.type === 'tool_call')
    return {
      ...base,
      serverId: s.serverId,
      tool: s.toolName,
      toolCallId: s.toolCallId,
      arguments: parseJson(s.argumentsJson) ?? {},
      result: parseJson(s.resultJson) ?? null,
      error: s.error || null,
      durationMs: s.durationMs ?? null,
    };
  return {
    ...base,
    toolName: s.toolName,
    toolCallId: s.toolCallId,
    arguments: parseJson(s.argumentsJson) ?? {},
    result: parseJson(s.resultJson) ?? null,
  };
}

export function runView(r: agentsV1.Run) {
  return {
    id: r.id,
    agentId: r.agentId,
    projectId: r.projectId,
    goal: r.goal,
    status: r.status,
    output: r.status === 'completed' || r.output ? r.output : null,
    error: r.error || null,
    steps: r.steps.map(stepView),
    usage: r.usage ?? { inputTokens: 0, outputTokens: 0 },
    createdAt: r.createdAt,
    startedAt: r.startedAt || null,
    completedAt: r.completedAt || null,
  };
}

const Name = Str(1, 200);
const SystemPrompt = Type.String({ maxLength: 20_000 });

export function agentView(a: agentsV1.Agent) {
  const c = a.config!;
  return {
    id: a.id,
    name: a.name,
    systemPrompt: a.systemPrompt,
    config: {
      autonomyLevel: c.autonomyLevel,
      maxSteps: c.maxSteps,
      timeBudgetSeconds: c.timeBudgetSeconds,
      model: c.model || null,
      temperature: c.temperature ?? null,
      tools: c.tools?.grants ?? [],
    },
    createdAt: a.createdAt,
    updatedAt: a.updatedAt,
  };
}

/** A config body as the proto message: absent fields are proto3 zero values, which the service reads as "unchanged". */
function configMessage(c: Record<string, unknown> | undefined): agentsV1.AgentConfig | undefined {
  if (!c) return undefined;
  return {
    autonomyLevel: (c.autonomyLevel as string | undefined) ?? '',
    maxSteps: (c.maxSteps as number | undefined) ?? 0,
    timeBudgetSeconds: (c.timeBudgetSeconds as number | undefined) ?? 0,
    model: (c.model as string | null | undefined) ?? '',
    temperature: (c.temperature as number | null | undefined) ?? undefined,
    tools: c.tools ? { grants: c.tools as Array<{ serverId: string; allow: string[] }> } : undefined,
  };
}

export function agentRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { agents } = deps.clients;

  route(app, {
    method: 'POST',
    url: '/api/v1/agents',
    operationId: 'createAgent',
    access: 'agents:write',
    tag: 'agents',
    summary: 'Create an agent',
    status: 201,
    body: Obj({
      name: Name,
      systemPrompt: Type.Optional(SystemPrompt),
      config: Type.Optional(
        Obj({
          autonomyLevel: Type.Optional(ConfigFields.autonomyLevel),
          maxSteps: Type.Optional(ConfigFields.maxSteps),
          timeBudgetSeconds: Type.Optional(ConfigFields.timeBudgetSeconds),
          model: Type.Optional(ConfigFields.model),
          temperature: Type.Optional(ConfigFields.temperature),
          tools: Type.Optional(ConfigFields.tools),
        }),
      ),
    }),
    response: Agent,
    handler: async ({ body, call }) =>
      agentView(
        (await agents.createAgent({ name: body.name, systemPrompt: body.systemPrompt ?? '', config: configMessage(body.config) }, call))
          .agent!,
      ),
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/agents',
    operationId: 'listAgents',
    access: 'agents:read',
    tag: 'agents',
    summary: 'Agents, newest first',
    query: PageQuery,
    list: true,
    response: Agent,
    handler: async ({ query, call }) => {
      const res = await agents.listAgents({ limit: query.limit, cursor: query.cursor ?? '' }, call);
      return pageOf(res.agents.map(agentView), query.limit, res.nextCursor);
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/agents/:id',
    operationId: 'getAgent',
    access: 'agents:read',
    tag: 'agents',
    summary: 'One agent',
    params: IdParams,
    response: Agent,
    handler: async ({ params, call }) => agentView((await agents.getAgent({ id: params.id }, call)).agent!),
  });

  route(app, {
    method: 'PATCH',
    url: '/api/v1/agents/:id',
    operationId: 'updateAgent',
    access: 'agents:write',
    tag: 'agents',
    summary: 'Change some fields of an agent; config fields merge, null model or temperature goes back to the tenant default',
    params: IdParams,
    body: Obj({
      name: Type.Optional(Name),
      systemPrompt: Type.Optional(SystemPrompt),
      config: Type.Optional(
        Obj({
          autonomyLevel: Type.Optional(ConfigFields.autonomyLevel),
          maxSteps: Type.Optional(ConfigFields.maxSteps),
          timeBudgetSeconds: Type.Optional(ConfigFields.timeBudgetSeconds),
          model: Type.Optional(Nullable(ConfigFields.model)),
          temperature: Type.Optional(Nullable(ConfigFields.temperature)),
          tools: Type.Optional(ConfigFields.tools),
        }),
      ),
    }),
    response: Agent,
    handler: async ({ params, body, call }) => {
      const res = await agents.updateAgent(
        {
          id: params.id,
          name: body.name,
          systemPrompt: body.systemPrompt,
          config: configMessage(body.config),
          clearModel: body.config?.model === null,
          clearTemperature: body.config?.temperature === null,
        },
        call,
      );
      return agentView(res.agent!);
    },
  });

  route(app, {
    method: 'DELETE',
    url: '/api/v1/agents/:id',
    operationId: 'deleteAgent',
    access: 'agents:write',
    tag: 'agents',
    summary: 'Delete an agent; its unfinished runs are cancelled, then its runs deleted',
    params: IdParams,
    response: Obj({ id: Type.String(), deleted: Type.Boolean() }),
    handler: async ({ params, call }) => ({ id: (await agents.deleteAgent({ id: params.id }, call)).id, deleted: true }),
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/agents/:id/execute',
    operationId: 'executeAgent',
    modelCall: true,
    access: 'agents:write',
    tag: 'agents',
    summary: "Start a run of the agent on a goal in one of the tenant's projects; the run continues in the background",
    status: 202,
    params: IdParams,
    body: Obj({ goal: Str(1, 10_000), projectId: Str(1, 100) }),
    response: Run,
    handler: async ({ params, body, call, principal, reply }) => {
      await assertKeyTokens(deps, principal, call, reply);
      return runView((await agents.executeAgent({ agentId: params.id, goal: body.goal, projectId: body.projectId }, call)).run!);
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/agents/:id/runs',
    operationId: 'listAgentRuns',
    access: 'agents:read',
    tag: 'agents',
    summary: "The agent's runs, newest first",
    params: IdParams,
    query: PageQuery,
    list: true,
    response: Run,
    handler: async ({ params, query, call }) => {
      const res = await agents.listRuns({ agentId: params.id, limit: query.limit, cursor: query.cursor ?? '' }, call);
      return pageOf(res.runs.map(runView), query.limit, res.nextCursor);
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/agents/:id/runs/:run_id',
    operationId: 'getAgentRun',
    access: 'agents:read',
    tag: 'agents',
    summary: 'One run with its steps',
    params: RunParams,
    response: Run,
    handler: async ({ params, call }) => runView((await agents.getRun({ agentId: params.id, runId: params.run_id }, call)).run!),
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/agents/:id/runs/:run_id/cancel',
    operationId: 'cancelAgentRun',
    access: 'agents:write',
    tag: 'agents',
    summary: 'Cancel an unfinished run (a model call in progress is aborted); a finished run is 409',
    params: RunParams,
    response: Run,
    handler: async ({ params, call }) => runView((await agents.cancelRun({ agentId: params.id, runId: params.run_id }, call)).run!),
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/agents/:id/runs/:run_id/approve',
    operationId: 'approveAgentRun',
    access: 'agents:write',
    tag: 'agents',
    summary: 'Let the tool call a supervised run waits on go ahead; a run not in requires_approval is 409',
    params: RunParams,
    response: Run,
    handler: async ({ params, call }) => runView((await agents.approveRun({ agentId: params.id, runId: params.run_id }, call)).run!),
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/agents/:id/runs/:run_id/reject',
    operationId: 'rejectAgentRun',
    access: 'agents:write',
    tag: 'agents',
    summary: 'Refuse the tool call a supervised run waits on; the model is told and carries on',
    params: RunParams,
    body: Obj({ reason: Type.Optional(Str(1, 2000)) }),
    optionalBody: true,
    response: Run,
    handler: async ({ params, body, call }) =>
      runView((await agents.rejectRun({ agentId: params.id, runId: params.run_id, reason: body.reason ?? '' }, call)).run!),
  });
}
