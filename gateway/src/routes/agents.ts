import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { agentsV1 } from '@svc/proto';
import type { GatewayDeps } from '../app';
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
};

const AgentConfig = Obj({
  autonomyLevel: AutonomyLevel,
  maxSteps: Type.Integer(),
  timeBudgetSeconds: Type.Integer(),
  model: Nullable(Type.String()),
  temperature: Nullable(Type.Number()),
});

const Agent = Obj({
  id: Type.String(),
  name: Type.String(),
  systemPrompt: Type.String(),
  config: AgentConfig,
  createdAt: Timestamp,
  updatedAt: Timestamp,
});

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
  };
}

export function agentRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { agents } = deps.clients;

  route(app, {
    method: 'POST',
    url: '/api/v1/agents',
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
    access: 'agents:write',
    tag: 'agents',
    summary: 'Delete an agent; its unfinished runs are cancelled',
    params: IdParams,
    response: Obj({ id: Type.String(), deleted: Type.Boolean() }),
    handler: async ({ params, call }) => ({ id: (await agents.deleteAgent({ id: params.id }, call)).id, deleted: true }),
  });
}
