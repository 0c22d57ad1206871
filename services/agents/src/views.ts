import type { agentsV1 } from '@svc/proto';
import type { AgentConfigDoc, AgentDoc, McpServerDoc, RunDoc, StepDoc } from './collections';

/** Documents as the API returns them (stored form -> proto message). */
export function toAgent(a: AgentDoc): agentsV1.Agent {
  return {
    id: a.id,
    name: a.name,
    systemPrompt: a.systemPrompt,
    config: toConfigMessage(a.config),
    createdAt: a.createdAt,
    updatedAt: a.updatedAt,
  };
}

export function toConfigMessage(c: AgentConfigDoc): agentsV1.AgentConfig {
  return {
    autonomyLevel: c.autonomyLevel,
    maxSteps: c.maxSteps,
    timeBudgetSeconds: c.timeBudgetSeconds,
    model: c.model ?? '',
    temperature: c.temperature ?? undefined,
    tools: { grants: (c.tools ?? []).map((g) => ({ serverId: g.serverId, allow: g.allow })) },
  };
}

function toStep(s: StepDoc): agentsV1.RunStep {
  return {
    index: s.index,
    type: s.type,
    startedAt: s.startedAt,
    completedAt: s.completedAt ?? '',
    text: s.text ?? '',
    toolName: s.toolName ?? '',
    toolCallId: s.toolCallId ?? '',
    argumentsJson: s.arguments === undefined ? '' : JSON.stringify(s.arguments),
    resultJson: s.result === undefined ? '' : JSON.stringify(s.result),
    status: s.status,
    usage: s.usage,
    model: s.model ?? '',
    serverId: s.serverId ?? '',
    error: s.error ?? '',
    durationMs: s.durationMs ?? undefined,
  };
}

export function toRun(r: RunDoc): agentsV1.Run {
  return {
    id: r.id,
    agentId: r.agentId,
    projectId: r.projectId,
    goal: r.goal,
    status: r.status,
    output: r.output ?? '',
    error: r.error ?? '',
    steps: r.steps.map(toStep),
    usage: r.usage,
    createdAt: r.createdAt,
    startedAt: r.startedAt ?? '',
    completedAt: r.completedAt ?? '',
  };
}

export function toMcpServer(d: McpServerDoc): agentsV1.McpServer {
  return {
    id: d.id,
    name: d.name,
    url: d.url,
    authSecret: d.authSecret ?? '',
    status: d.status,
    error: d.error ?? '',
    tools: d.tools.map((t) => ({
      name: t.name,
      description: t.description,
      inputSchemaJson: JSON.stringify(t.inputSchema),
      readOnly: t.readOnly,
    })),
    createdAt: d.createdAt,
    updatedAt: d.updatedAt,
  };
}
