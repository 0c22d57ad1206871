/**
 * The built-in tools of a run. Each works on the tenant's own data through the projects service with the run's
 * delegated token, declares the scope it needs and whether it changes data (supervised runs wait for approval
 * before those). Tools that change data only set fields to given values, so running one again after a crash (its
 * result not yet recorded) is harmless.
 */
import { isAppError, type ServiceClient } from '@svc/kit';
import type { LlmTool } from '@svc/llm';
import type { projectsV1 } from '@svc/proto';
import type { AutonomyLevel } from './collections';

export type ProjectsClient = ServiceClient<typeof projectsV1.ProjectsServiceService>;

export interface ToolContext {
  projects: ProjectsClient;
  token: string;
  /** The run's project: the one `update_project` may change. */
  projectId: string;
}

export interface Tool {
  spec: LlmTool;
  scope: 'projects:read' | 'projects:write';
  changesData: boolean;
  run(args: Record<string, unknown>, ctx: ToolContext): Promise<unknown>;
}

/** A problem with the model's arguments: returned to the model as the tool's error, so it can correct itself. */
class ToolInputError extends Error {}

function optionalString(args: Record<string, unknown>, name: string, max: number): string | undefined {
  const v = args[name];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw new ToolInputError(`${name} must be a string`);
  if (v.length > max) throw new ToolInputError(`${name} must be at most ${max} characters`);
  return v;
}

function refuseUnknown(args: Record<string, unknown>, allowed: string[]): void {
  const extra = Object.keys(args).filter((k) => !allowed.includes(k));
  if (extra.length) throw new ToolInputError(`unknown arguments: ${extra.join(', ')}`);
}

function project(p: projectsV1.Project | undefined) {
  return p && { id: p.id, name: p.name, description: p.description, language: p.language, updatedAt: p.updatedAt };
}

export const TOOLS: Tool[] = [
  {
    spec: {
      name: 'get_project',
      description: "Reads a project of this workspace: its name, description and language. Without projectId, the run's own project.",
      parameters: { type: 'object', properties: { projectId: { type: 'string' } }, additionalProperties: false },
    },
    scope: 'projects:read',
    changesData: false,
    async run(args, ctx) {
      refuseUnknown(args, ['projectId']);
      const id = optionalString(args, 'projectId', 100) ?? ctx.projectId;
      return { project: project((await ctx.projects.getProject({ id }, { token: ctx.token })).project) };
    },
  },
  {
    spec: {
      name: 'list_projects',
      description: 'Lists the projects of this workspace, newest first (at most 50).',
      parameters: { type: 'object', properties: { limit: { type: 'integer', minimum: 1, maximum: 50 } }, additionalProperties: false },
    },
    scope: 'projects:read',
    changesData: false,
    async run(args, ctx) {
      refuseUnknown(args, ['limit']);
      const limit = args.limit === undefined ? 20 : Number(args.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > 50) throw new ToolInputError('limit must be an integer from 1 to 50');
      const res = await ctx.projects.listProjects({ limit, cursor: '' }, { token: ctx.token });
      return { projects: res.projects.map(project) };
    },
  },
  {
    spec: {
      name: 'update_project',
      description: "Changes the description and/or the programming language of the run's project.",
      parameters: {
        type: 'object',
        properties: { description: { type: 'string', maxLength: 5000 }, language: { type: 'string', maxLength: 50 } },
        additionalProperties: false,
      },
    },
    scope: 'projects:write',
    changesData: true,
    async run(args, ctx) {
      refuseUnknown(args, ['description', 'language']);
      const description = optionalString(args, 'description', 5000);
      const language = optionalString(args, 'language', 50);
      if (description === undefined && language === undefined) throw new ToolInputError('give description, language or both');
      const res = await ctx.projects.updateProject({ id: ctx.projectId, description, language }, { token: ctx.token });
      return { project: project(res.project) };
    },
  },
];

/** The tools offered to a run: none in manual mode, and only those its delegated scopes allow. */
export function toolsFor(level: AutonomyLevel, scopes: readonly string[]): Tool[] {
  if (level === 'manual') return [];
  return TOOLS.filter((t) => scopes.includes(t.scope));
}

/**
 * Scopes a run asks to be delegated: reading the project always (its context goes into the prompt); with tools,
 * changing it and reading secrets (the bearer tokens of MCP servers, resolved at each call).
 */
export function scopesFor(level: AutonomyLevel): string[] {
  return level === 'manual' ? ['projects:read'] : ['projects:read', 'projects:write', 'secrets:read'];
}

const MAX_RESULT_CHARS = 16_000;

/**
 * Runs a tool; never throws. The result, or `{error}` for bad arguments and refusals by the projects service,
 * is what the model sees next. Results are capped so one tool cannot blow up the run document or the prompt.
 */
export async function runTool(tool: Tool, args: Record<string, unknown>, ctx: ToolContext): Promise<{ ok: boolean; result: unknown }> {
  try {
    const result = await tool.run(args, ctx);
    const text = JSON.stringify(result);
    if (text.length > MAX_RESULT_CHARS) return { ok: true, result: { truncated: true, json: text.slice(0, MAX_RESULT_CHARS) } };
    return { ok: true, result };
  } catch (err) {
    if (err instanceof ToolInputError) return { ok: false, result: { error: err.message } };
    if (isAppError(err)) return { ok: false, result: { error: err.message, code: err.code } };
    return { ok: false, result: { error: 'the tool failed' } };
  }
}
