/**
 * `/mcp` (CONTRACT.md 11): the platform as an MCP server over Streamable HTTP, with the official SDK's server and
 * transport (stateless: a server per request, JSON answers; a GET's event stream counts against SSE_STREAMS_PER_TENANT
 * with every other SSE route's). Only a tenant API key authenticates (a user token or cookie: 401). Each tool mirrors a
 * REST route and needs its scope: a tool outside the key's scopes is absent from tools/list, and calling it is a
 * JSON-RPC error. The tools call the services with the key's own credential, so tenancy, limits and credits apply as
 * they do on the REST API.
 *
 * The route is registered at start-up like every other (route table, OpenAPI, 405s), but the SDK (its server, the
 * Streamable HTTP transport and zod: ~300 ms to load) is required by the first `/mcp` request: the gateway starts
 * without it, and that one request pays for the load once (accepted: most gateways never serve MCP).
 */
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { Ajv } from 'ajv';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { isAppError, type AppError, type CallOptions } from '@svc/kit';
import type { GatewayDeps } from '../deps';
import { assertKeyTokens } from '../lib/key-usage';
import type { Principal } from '../lib/principal';
import { assertEmailVerified } from '../lib/verified-email';
import { openStreams, tenantStreams } from '../lib/sse';
import { agentView, runView } from './agents';
import { projectView } from './projects';

/** How long run_agent waits for its run to finish before answering with the run id and status. */
export const RUN_AGENT_WAIT_MS = 60_000;
const POLL_MS = 250;
const FINISHED = ['completed', 'failed', 'cancelled', 'requires_approval'];

type Args = Record<string, unknown>;

interface ToolCtx {
  deps: GatewayDeps;
  call: CallOptions;
  signal: AbortSignal;
  principal: Principal;
  reply: FastifyReply;
}

interface PlatformTool {
  name: string;
  description: string;
  scope: 'projects:read' | 'agents:read' | 'agents:write';
  readOnly: boolean;
  /** The tool starts model calls: REQUIRE_VERIFIED_EMAIL refuses it as it refuses the REST route it mirrors. */
  modelCall?: true;
  inputSchema: { type: 'object'; properties: Record<string, unknown>; required?: string[]; additionalProperties: false };
  run(args: Args, ctx: ToolCtx): Promise<unknown>;
}

const page = {
  limit: { type: 'integer', minimum: 1, maximum: 100, description: 'default 20' },
  cursor: { type: 'string', minLength: 1, maxLength: 512, description: 'next_cursor of the previous page' },
};
const id = { type: 'string', minLength: 1, maxLength: 100 };

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
  });
}

export const PLATFORM_TOOLS: PlatformTool[] = [
  {
    name: 'list_projects',
    description: 'Lists the projects of this workspace, newest first.',
    scope: 'projects:read',
    readOnly: true,
    inputSchema: { type: 'object', properties: page, additionalProperties: false },
    async run(args, { deps, call }) {
      const res = await deps.clients.projects.listProjects(
        { limit: (args.limit as number) ?? 20, cursor: (args.cursor as string) ?? '' },
        call,
      );
      return { projects: res.projects.map(projectView), next_cursor: res.nextCursor || null };
    },
  },
  {
    name: 'get_project',
    description: 'Reads one project of this workspace.',
    scope: 'projects:read',
    readOnly: true,
    inputSchema: { type: 'object', properties: { projectId: id }, required: ['projectId'], additionalProperties: false },
    async run(args, { deps, call }) {
      return { project: projectView((await deps.clients.projects.getProject({ id: args.projectId as string }, call)).project!) };
    },
  },
  {
    name: 'list_agents',
    description: 'Lists the agents of this workspace, newest first.',
    scope: 'agents:read',
    readOnly: true,
    inputSchema: { type: 'object', properties: page, additionalProperties: false },
    async run(args, { deps, call }) {
      const res = await deps.clients.agents.listAgents(
        { limit: (args.limit as number) ?? 20, cursor: (args.cursor as string) ?? '' },
        call,
      );
      return { agents: res.agents.map(agentView), next_cursor: res.nextCursor || null };
    },
  },
  {
    name: 'run_agent',
    description:
      'Runs an agent on a goal in a project and waits up to 60 s: the output when it finishes, else the run id and its status ' +
      '(requires_approval when a tool call waits for approval, or still running: follow it with get_run).',
    scope: 'agents:write',
    readOnly: false,
    modelCall: true,
    inputSchema: {
      type: 'object',
      properties: { agentId: id, projectId: id, goal: { type: 'string', minLength: 1, maxLength: 10_000 } },
      required: ['agentId', 'projectId', 'goal'],
      additionalProperties: false,
    },
    async run(args, { deps, call, signal, principal, reply }) {
      // As POST /agents/:id/execute: a key whose tokens per minute are used up starts no run.
      await assertKeyTokens(deps, principal, call, reply);
      const agentId = args.agentId as string;
      let run = (await deps.clients.agents.executeAgent({ agentId, projectId: args.projectId as string, goal: args.goal as string }, call))
        .run!;
      const deadline = Date.now() + RUN_AGENT_WAIT_MS;
      while (!FINISHED.includes(run.status) && Date.now() < deadline && !signal.aborted) {
        await sleep(POLL_MS, signal);
        run = (await deps.clients.agents.getRun({ agentId, runId: run.id }, call)).run!;
      }
      const view = runView(run);
      return { runId: view.id, agentId, status: view.status, output: view.output, error: view.error };
    },
  },
  {
    name: 'get_run',
    description: 'Reads a run of an agent: its status, output and steps.',
    scope: 'agents:read',
    readOnly: true,
    inputSchema: { type: 'object', properties: { agentId: id, runId: id }, required: ['agentId', 'runId'], additionalProperties: false },
    async run(args, { deps, call }) {
      return {
        run: runView((await deps.clients.agents.getRun({ agentId: args.agentId as string, runId: args.runId as string }, call)).run!),
      };
    },
  },
];

const ajv = new Ajv({ allErrors: true, strict: false });
/** A tool's argument validator, compiled by its first call (not when the gateway loads: see lib/validation.ts). */
const validators = new Map<string, ReturnType<Ajv['compile']>>();
function validatorOf(tool: PlatformTool) {
  let validate = validators.get(tool.name);
  if (!validate) validators.set(tool.name, (validate = ajv.compile(tool.inputSchema)));
  return validate;
}

/** The tools this principal may use: all of them for an unscoped key, else those whose scope it holds. */
export function toolsFor(p: Principal): PlatformTool[] {
  return PLATFORM_TOOLS.filter((t) => p.scopes === undefined || p.scopes.includes(t.scope));
}

interface McpSdk {
  Server: typeof import('@modelcontextprotocol/sdk/server/index.js').Server;
  StreamableHTTPServerTransport: typeof import('@modelcontextprotocol/sdk/server/streamableHttp.js').StreamableHTTPServerTransport;
  types: typeof import('@modelcontextprotocol/sdk/types.js');
}

/** The SDK's modules, required by the first `/mcp` request (see the top of this file; Node's module cache keeps them). */
function mcpSdk(): McpSdk {
  /* eslint-disable @typescript-eslint/no-require-imports -- deliberate lazy load */
  return {
    Server: (require('@modelcontextprotocol/sdk/server/index.js') as typeof import('@modelcontextprotocol/sdk/server/index.js')).Server,
    StreamableHTTPServerTransport: (
      require('@modelcontextprotocol/sdk/server/streamableHttp.js') as typeof import('@modelcontextprotocol/sdk/server/streamableHttp.js')
    ).StreamableHTTPServerTransport,
    types: require('@modelcontextprotocol/sdk/types.js') as typeof import('@modelcontextprotocol/sdk/types.js'),
  };
  /* eslint-enable @typescript-eslint/no-require-imports */
}

function buildServer(deps: GatewayDeps, principal: Principal, call: CallOptions, reply: FastifyReply): Server {
  const {
    Server,
    types: { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, McpError },
  } = mcpSdk();
  const allowed = toolsFor(principal);
  const server = new Server({ name: 'svc-platform', version: '1.0.0' }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: allowed.map((t) => ({
      name: t.name,
      description: t.description,
      inputSchema: t.inputSchema,
      annotations: { readOnlyHint: t.readOnly },
    })),
  }));
  server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
    const name = req.params.name;
    const tool = PLATFORM_TOOLS.find((t) => t.name === name);
    if (!tool) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${name}`);
    if (!allowed.includes(tool))
      throw new McpError(ErrorCode.InvalidParams, `The tool ${name} needs the scope ${tool.scope}, which this API key does not have`, {
        reason: 'missing_scope',
        requiredScope: tool.scope,
      });
    const args = (req.params.arguments ?? {}) as Args;
    const validate = validatorOf(tool);
    if (!validate(args))
      throw new McpError(
        ErrorCode.InvalidParams,
        `Invalid arguments for ${name}: ${(validate.errors ?? []).map((e) => `${e.instancePath || '(arguments)'} ${e.message}`).join('; ')}`,
      );
    try {
      // /mcp is one route for every tool: the gate that guards model-calling routes runs here, per tool.
      if (tool.modelCall) await assertEmailVerified(deps, principal, call.requestId);
      const result = await tool.run(args, { deps, call, signal: extra.signal, principal, reply });
      return { content: [{ type: 'text', text: JSON.stringify(result) }], structuredContent: result as Record<string, unknown> };
    } catch (err) {
      // The platform's own refusals (not found, credits, validation) are the tool's error, as the REST API's envelope.
      if (isAppError(err)) return { isError: true, content: [{ type: 'text', text: JSON.stringify(toolError(err)) }] };
      throw err;
    }
  });
  return server;
}

/** A refusal as the REST envelope's `error` has it (details.reason says which); a 500 keeps its internals to the log. */
function toolError(err: AppError) {
  if (err.httpStatus === 500) return { error: { code: err.code, message: 'Internal server error', details: {} } };
  return { error: { code: err.code, message: err.message, details: err.details } };
}

/** A GET that opens the server's event stream (the transport answers one without `text/event-stream` with a 406). */
function opensStream(request: FastifyRequest): boolean {
  return request.method === 'GET' && (request.headers.accept ?? '').includes('text/event-stream');
}

export function mcpRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  /** Open streams per tenant, one count with the other SSE routes (lib/sse.ts). */
  const streams = tenantStreams(deps);
  const open = openStreams(app);
  const handler = async (request: FastifyRequest, reply: FastifyReply) => {
    // One HTTP request is one count against the key's rates, so it carries one message: a JSON-RPC batch (which MCP
    // dropped in its 2025-06-18 revision, and no SDK client sends) would run up to 100 tool calls on one count.
    if (Array.isArray(request.body))
      return reply.code(400).send({
        jsonrpc: '2.0',
        id: null,
        error: { code: -32600, message: 'JSON-RPC batches are not supported: send one message per request' },
      });
    // The GET stream stays open until its client leaves: it takes a place as the other SSE routes' streams do.
    const stream = opensStream(request);
    if (stream) streams.holdFor(reply);
    const principal = request.principal!;
    const call: CallOptions = { token: principal.token, requestId: request.id, clientIp: request.ip };
    const server = buildServer(deps, principal, call, reply);
    // Stateless: no session id, one server per request, JSON answers to POSTs (a GET opens the server's event stream).
    const transport = new (mcpSdk().StreamableHTTPServerTransport)({ sessionIdGenerator: undefined, enableJsonResponse: true });
    reply.hijack();
    reply.raw.setHeader('x-request-id', request.id);
    const close = () => {
      void transport.close();
      void server.close();
    };
    // An open stream would hold the gateway open on shutdown: it is kept, and ended, with the other routes' streams.
    if (stream) open.keep(reply.raw, close);
    else reply.raw.on('close', close);
    await server.connect(transport);
    await transport.handleRequest(request.raw, reply.raw, request.body);
  };
  for (const method of ['POST', 'GET', 'DELETE'] as const)
    app.route({ method, url: '/mcp', config: { access: 'mcp', rateLimited: true }, handler });
}
