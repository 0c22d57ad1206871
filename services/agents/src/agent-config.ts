import { errors, type FieldError } from '@svc/kit';
import type { agentsV1 } from '@svc/proto';
import { AUTONOMY_LEVELS, type AgentConfigDoc, type AutonomyLevel } from './collections';

/** Bounds of agent fields; the gateway's schemas say the same, this guards every other gRPC caller. */
export const AGENT_LIMITS = {
  name: [1, 200],
  systemPrompt: [0, 20_000],
  maxSteps: [1, 50],
  timeBudgetSeconds: [10, 3600],
  model: [1, 200],
  temperature: [0, 2],
} as const;

export const DEFAULT_CONFIG: AgentConfigDoc = {
  autonomyLevel: 'supervised',
  maxSteps: 10,
  timeBudgetSeconds: 300,
  model: null,
  temperature: null,
};

const MAX_GRANTS = 20;
const MAX_ALLOW = 100;

function inRange(value: number, [min, max]: readonly [number, number]): boolean {
  return value >= min && value <= max;
}

/**
 * Merges the set fields of a config message over `base` (proto3: "" and 0 mean "not given") and checks the result.
 * Every problem is reported at once.
 */
export function mergeConfig(
  base: AgentConfigDoc,
  input: agentsV1.AgentConfig | undefined,
  clear: { model?: boolean; temperature?: boolean } = {},
): AgentConfigDoc {
  const out: AgentConfigDoc = { ...base };
  const problems: FieldError[] = [];
  if (input) {
    if (input.autonomyLevel !== '') {
      if ((AUTONOMY_LEVELS as readonly string[]).includes(input.autonomyLevel)) out.autonomyLevel = input.autonomyLevel as AutonomyLevel;
      else problems.push({ field: 'config.autonomyLevel', message: `must be one of ${AUTONOMY_LEVELS.join(', ')}` });
    }
    if (input.maxSteps !== 0) {
      if (Number.isInteger(input.maxSteps) && inRange(input.maxSteps, AGENT_LIMITS.maxSteps)) out.maxSteps = input.maxSteps;
      else problems.push({ field: 'config.maxSteps', message: `must be an integer from ${AGENT_LIMITS.maxSteps.join(' to ')}` });
    }
    if (input.timeBudgetSeconds !== 0) {
      if (Number.isInteger(input.timeBudgetSeconds) && inRange(input.timeBudgetSeconds, AGENT_LIMITS.timeBudgetSeconds))
        out.timeBudgetSeconds = input.timeBudgetSeconds;
      else
        problems.push({
          field: 'config.timeBudgetSeconds',
          message: `must be an integer from ${AGENT_LIMITS.timeBudgetSeconds.join(' to ')}`,
        });
    }
    if (input.model !== '') {
      const model = input.model.trim();
      if (inRange(model.length, AGENT_LIMITS.model)) out.model = model;
      else problems.push({ field: 'config.model', message: `must be ${AGENT_LIMITS.model.join(' to ')} characters` });
    }
    if (input.tools !== undefined) {
      const grants = input.tools.grants;
      const bad = (i: number, message: string) => problems.push({ field: `config.tools[${i}]`, message });
      if (grants.length > MAX_GRANTS) problems.push({ field: 'config.tools', message: `at most ${MAX_GRANTS} servers` });
      const seen = new Set<string>();
      grants.forEach((g, i) => {
        if (!/^[a-z]{2,8}_[0-9A-Za-z]{1,64}$/.test(g.serverId)) bad(i, 'serverId must be the id of one of your MCP servers');
        else if (seen.has(g.serverId)) bad(i, 'lists a server twice');
        seen.add(g.serverId);
        if (g.allow.length < 1 || g.allow.length > MAX_ALLOW) bad(i, `allow must list 1 to ${MAX_ALLOW} tool names`);
        if (g.allow.some((n) => n.length < 1 || n.length > 128)) bad(i, 'a tool name is 1 to 128 characters');
      });
      out.tools = grants.map((g) => ({ serverId: g.serverId, allow: [...new Set(g.allow)] }));
    }
    if (input.temperature !== undefined) {
      if (Number.isFinite(input.temperature) && inRange(input.temperature, AGENT_LIMITS.temperature)) out.temperature = input.temperature;
      else problems.push({ field: 'config.temperature', message: `must be from ${AGENT_LIMITS.temperature.join(' to ')}` });
    }
  }
  if (clear.model) out.model = null;
  if (clear.temperature) out.temperature = null;
  if (problems.length) throw errors.validation(problems);
  return out;
}

export function checkText(field: 'name' | 'systemPrompt', value: string): string {
  const v = field === 'name' ? value.trim() : value;
  const [min, max] = AGENT_LIMITS[field];
  if (v.length < min || v.length > max) throw errors.validation([{ field, message: `must be ${min} to ${max} characters` }]);
  return v;
}
