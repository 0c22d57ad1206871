import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { agentsV1 } from '@svc/proto';
import type { GatewayDeps } from '../deps';
import { pageOf, route } from '../lib/route';
import { IdParams, Nullable, Obj, PageQuery, Str, Timestamp } from '../schemas';

const Auth = Obj(
  {
    type: Type.Literal('bearer'),
    secret: Str(1, 128, {
      pattern: '^[A-Za-z_][A-Za-z0-9_]{0,127}$',
      description: 'The name of one of your secrets: its value is sent as the bearer token at each connection',
    }),
  },
  'Authentication sent to the server; the token itself is never stored in the registration',
);

const McpTool = Obj({
  name: Type.String(),
  description: Type.String(),
  inputSchema: Type.Unknown({ description: "The tool's input JSON Schema" }),
  readOnly: Type.Boolean({ description: "The server's readOnlyHint: supervised runs call it without asking" }),
});

const McpServer = Obj({
  id: Type.String(),
  name: Type.String(),
  url: Type.String(),
  auth: Nullable(Auth),
  status: Type.Union([Type.Literal('ready'), Type.Literal('error')]),
  error: Nullable(Type.String({ description: 'Why the last connection failed; null when ready' })),
  tools: Type.Array(McpTool),
  createdAt: Timestamp,
  updatedAt: Timestamp,
});

const Fields = {
  name: Str(1, 200),
  url: Str(1, 2000, { description: 'The Streamable HTTP endpoint of the MCP server (http or https)' }),
};

export function mcpServerView(s: agentsV1.McpServer) {
  return {
    id: s.id,
    name: s.name,
    url: s.url,
    auth: s.authSecret ? { type: 'bearer' as const, secret: s.authSecret } : null,
    status: s.status,
    error: s.error || null,
    tools: s.tools.map((t) => ({
      name: t.name,
      description: t.description,
      inputSchema: JSON.parse(t.inputSchemaJson || '{}'),
      readOnly: t.readOnly,
    })),
    createdAt: s.createdAt,
    updatedAt: s.updatedAt,
  };
}

export function mcpServerRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { agents } = deps.clients;

  route(app, {
    method: 'POST',
    url: '/api/v1/mcp-servers',
    operationId: 'createMcpServer',
    access: 'agents:write',
    tag: 'mcp-servers',
    summary: 'Register an MCP server (Streamable HTTP): the platform connects and lists its tools; unreachable is status error',
    status: 201,
    body: Obj({ name: Fields.name, url: Fields.url, auth: Type.Optional(Auth) }),
    response: McpServer,
    handler: async ({ body, call }) =>
      mcpServerView((await agents.createMcpServer({ name: body.name, url: body.url, authSecret: body.auth?.secret ?? '' }, call)).server!),
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/mcp-servers',
    operationId: 'listMcpServers',
    access: 'agents:read',
    tag: 'mcp-servers',
    summary: 'MCP servers, newest first',
    query: PageQuery,
    list: true,
    response: McpServer,
    handler: async ({ query, call }) => {
      const res = await agents.listMcpServers({ limit: query.limit, cursor: query.cursor ?? '' }, call);
      return pageOf(res.servers.map(mcpServerView), query.limit, res.nextCursor);
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/mcp-servers/:id',
    operationId: 'getMcpServer',
    access: 'agents:read',
    tag: 'mcp-servers',
    summary: 'One MCP server and its tools',
    params: IdParams,
    response: McpServer,
    handler: async ({ params, call }) => mcpServerView((await agents.getMcpServer({ id: params.id }, call)).server!),
  });

  route(app, {
    method: 'PATCH',
    url: '/api/v1/mcp-servers/:id',
    operationId: 'updateMcpServer',
    access: 'agents:write',
    tag: 'mcp-servers',
    summary: 'Change an MCP server; a new url or auth lists its tools again; auth null removes the token',
    params: IdParams,
    body: Obj({ name: Type.Optional(Fields.name), url: Type.Optional(Fields.url), auth: Type.Optional(Nullable(Auth)) }),
    response: McpServer,
    handler: async ({ params, body, call }) =>
      mcpServerView(
        (
          await agents.updateMcpServer(
            { id: params.id, name: body.name, url: body.url, authSecret: body.auth?.secret, clearAuth: body.auth === null },
            call,
          )
        ).server!,
      ),
  });

  route(app, {
    method: 'DELETE',
    url: '/api/v1/mcp-servers/:id',
    operationId: 'deleteMcpServer',
    access: 'agents:write',
    tag: 'mcp-servers',
    summary: 'Delete an MCP server; agents that list it are offered its tools no more',
    params: IdParams,
    response: Obj({ id: Type.String(), deleted: Type.Boolean() }),
    handler: async ({ params, call }) => ({ id: (await agents.deleteMcpServer({ id: params.id }, call)).id, deleted: true }),
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/mcp-servers/:id/refresh',
    operationId: 'refreshMcpServer',
    access: 'agents:write',
    tag: 'mcp-servers',
    summary: 'Connect again and list the tools',
    params: IdParams,
    response: McpServer,
    handler: async ({ params, call }) => mcpServerView((await agents.refreshMcpServer({ id: params.id }, call)).server!),
  });
}
