/** The agents service's handlers, by what they serve: agents, their runs, the tenant's MCP servers. */
export { agentHandlers, loadAgent } from './agents';
export { runHandlers, type RunHandlerDeps } from './runs';
export { mcpHandlers, type McpHandlerDeps } from './mcp-servers';
