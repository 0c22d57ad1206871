/**
 * MCP tools in a run (CONTRACT.md 11): which of the agent's granted tools are offered to the model, the checks made
 * before a call reaches a server (allowlist, input schema), and the call itself as a `tool_call` step.
 */
import type { Ajv, ValidateFunction } from 'ajv';
import { isAppError, type ServiceClient, type Store } from '@svc/kit';
import type { LlmTool } from '@svc/llm';
import type { identityV1 } from '@svc/proto';
import { mcpServers, type AgentToolGrant, type McpServerDoc, type McpToolDoc, type StepDoc } from './collections';
import { McpCallError, type McpConnector } from './mcp-client';
import { resolveBearer } from './handlers/mcp-servers';

export interface McpRuntime {
  store: Store;
  identity: ServiceClient<typeof identityV1.IdentityServiceService>;
  connector: McpConnector;
  /** MCP_CALL_TIMEOUT_S in ms: one call, connection included. */
  callTimeoutMs: number;
  /** Results longer than this (as JSON) are cut (the run document and the prompt stay bounded). */
  maxResultChars: number;
}

/** One allowed tool of one server, as offered to the model. */
export interface McpOffer {
  server: McpServerDoc;
  tool: McpToolDoc;
  spec: LlmTool;
}

export interface McpToolset {
  offers: McpOffer[];
  /** Tools of a granted server that the agent is not allowed: a call to one is refused naming the server. */
  refused: Map<string, string>;
}

export const EMPTY_TOOLSET: McpToolset = { offers: [], refused: new Map() };

/** The agent's granted tools that exist on its ready servers; names the built-ins (or an earlier grant) use are skipped. */
export async function loadToolset(rt: McpRuntime, tenantId: string, grants: AgentToolGrant[], taken: Set<string>): Promise<McpToolset> {
  const offers: McpOffer[] = [];
  const refused = new Map<string, string>();
  for (const g of grants) {
    const server = await rt.store.collection(mcpServers).get(g.serverId, { tenantId });
    if (!server) continue;
    for (const tool of server.tools) {
      if (!g.allow.includes(tool.name)) {
        if (!refused.has(tool.name)) refused.set(tool.name, server.id);
        continue;
      }
      if (taken.has(tool.name)) continue;
      taken.add(tool.name);
      offers.push({ server, tool, spec: { name: tool.name, description: tool.description, parameters: tool.inputSchema } });
    }
  }
  for (const name of taken) refused.delete(name);
  return { offers, refused };
}

/** Made by the first tool call checked (ajv is ~25 ms of a services process's start otherwise). */
let ajv: Ajv | undefined;
// eslint-disable-next-line @typescript-eslint/no-require-imports -- deliberate lazy load
const newAjv = () => new (require('ajv') as typeof import('ajv')).Ajv({ strict: false, allErrors: true, validateFormats: false });
const compiled = new WeakMap<object, ValidateFunction | Error>();

/** Null when the arguments satisfy the tool's input schema, else why not (a schema that cannot compile refuses). */
export function checkArguments(tool: McpToolDoc, args: unknown): string | null {
  let validate = compiled.get(tool.inputSchema);
  if (!validate) {
    try {
      validate = (ajv ??= newAjv()).compile(tool.inputSchema);
    } catch (err) {
      validate = err as Error;
    }
    compiled.set(tool.inputSchema, validate);
  }
  if (validate instanceof Error) return `the tool's input schema cannot be used: ${validate.message.slice(0, 300)}`;
  if (validate(args)) return null;
  return (validate.errors ?? [])
    .slice(0, 5)
    .map((e) => `${e.instancePath || '(arguments)'} ${e.message ?? 'is invalid'}`)
    .join('; ');
}

/** The step recorded for a tool call the model made: pending when it may run, failed (with why) when it may not. */
export function toolCallStep(
  base: Pick<StepDoc, 'index' | 'startedAt' | 'toolCallId' | 'arguments'>,
  name: string,
  set: McpToolset,
): StepDoc | null {
  const offer = set.offers.find((o) => o.tool.name === name);
  const common = { ...base, type: 'tool_call' as const, toolName: name, durationMs: null, result: null };
  if (offer) {
    const why = checkArguments(offer.tool, base.arguments ?? {});
    if (why)
      return {
        ...common,
        serverId: offer.server.id,
        status: 'failed',
        completedAt: base.startedAt,
        error: `invalid_arguments: the arguments for the tool ${name} do not match its input schema: ${why}`,
      };
    return { ...common, serverId: offer.server.id, status: 'pending', completedAt: null, error: null };
  }
  const serverId = set.refused.get(name);
  if (serverId)
    return {
      ...common,
      serverId,
      status: 'failed',
      completedAt: base.startedAt,
      error: `tool_not_allowed: the tool ${name} is not on this agent's allowlist`,
    };
  return null;
}

/** Runs a pending (or approved) tool_call step; never throws (but for a cancelled run). */
export async function callTool(
  rt: McpRuntime,
  offer: McpOffer,
  args: Record<string, unknown>,
  run: { token: string },
  signal: AbortSignal,
): Promise<Pick<StepDoc, 'status' | 'result' | 'error' | 'durationMs'>> {
  let bearer: string | undefined;
  if (offer.server.authSecret) {
    try {
      bearer = await resolveBearer(rt.identity, offer.server.authSecret, { token: run.token });
    } catch (err) {
      const why = isAppError(err) ? err.code : 'unavailable';
      return {
        status: 'failed',
        result: null,
        durationMs: 0,
        error: `secret_unavailable: the secret ${offer.server.authSecret} could not be read (${why})`,
      };
    }
  }
  const started = performance.now();
  try {
    const res = await rt.connector.callTool({ url: offer.server.url, bearer }, offer.tool.name, args, rt.callTimeoutMs, signal);
    const durationMs = Math.round(performance.now() - started);
    let result: unknown =
      res.structuredContent !== undefined ? { content: res.content, structuredContent: res.structuredContent } : { content: res.content };
    const text = JSON.stringify(result);
    if (text.length > rt.maxResultChars) result = { truncated: true, json: text.slice(0, rt.maxResultChars) };
    if (res.isError) return { status: 'failed', result, durationMs, error: `tool_error: the tool ${offer.tool.name} reported an error` };
    return { status: 'completed', result, durationMs, error: null };
  } catch (err) {
    if (signal.aborted) throw err;
    const durationMs = Math.round(performance.now() - started);
    const message = err instanceof McpCallError ? err.message : 'the call failed';
    return { status: 'failed', result: null, durationMs, error: `mcp_call_failed: ${offer.tool.name}: ${message}` };
  }
}
