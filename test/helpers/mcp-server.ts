/**
 * A real MCP server for tests, built with the official SDK (Streamable HTTP, stateless: a server and transport per
 * request) on a loopback port. It records every tools/call it receives and the Authorization header of every request.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

export interface TestMcpServer {
  url: string;
  /** tools/call requests received: the tool's name and arguments. */
  calls: Array<{ tool: string; arguments: Record<string, unknown> }>;
  /** The Authorization header of every HTTP request (undefined when absent). */
  authorizations: Array<string | undefined>;
  notes: string[];
  close(): Promise<void>;
}

/**
 * Tools: `lookup` (read-only: readOnlyHint), `write_note` (changes data), `slow` (answers after `slowMs`), and
 * `admin_reset` (changes data; tests leave it off allowlists).
 */
export async function startTestMcpServer(options: { slowMs?: number } = {}): Promise<TestMcpServer> {
  const calls: TestMcpServer['calls'] = [];
  const authorizations: TestMcpServer['authorizations'] = [];
  const notes: string[] = [];
  const timers = new Set<NodeJS.Timeout>();

  function build(): McpServer {
    const server = new McpServer({ name: 'test-tools', version: '1.0.0' });
    server.registerTool(
      'lookup',
      {
        description: 'Looks a word up',
        inputSchema: { q: z.string().min(1) },
        annotations: { readOnlyHint: true },
      },
      async ({ q }) => {
        calls.push({ tool: 'lookup', arguments: { q } });
        return { content: [{ type: 'text', text: `definition of ${q}` }] };
      },
    );
    server.registerTool(
      'write_note',
      { description: 'Stores a note', inputSchema: { text: z.string().max(200) }, annotations: { readOnlyHint: false } },
      async ({ text }) => {
        calls.push({ tool: 'write_note', arguments: { text } });
        notes.push(text);
        return { content: [{ type: 'text', text: `stored note ${notes.length}` }] };
      },
    );
    server.registerTool('slow', { description: 'Takes its time', inputSchema: {} }, async () => {
      calls.push({ tool: 'slow', arguments: {} });
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, options.slowMs ?? 60_000);
        timers.add(t);
      });
      return { content: [{ type: 'text', text: 'finally' }] };
    });
    server.registerTool('admin_reset', { description: 'Deletes every note', inputSchema: {} }, async () => {
      calls.push({ tool: 'admin_reset', arguments: {} });
      notes.length = 0;
      return { content: [{ type: 'text', text: 'reset' }] };
    });
    return server;
  }

  const http: Server = createServer((req, res) => {
    authorizations.push(req.headers.authorization);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const body = text ? JSON.parse(text) : undefined;
      const server = build();
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
      res.on('close', () => {
        void transport.close();
        void server.close();
      });
      server
        .connect(transport)
        .then(() => transport.handleRequest(req, res, body))
        .catch(() => {
          if (!res.headersSent) res.writeHead(500).end();
        });
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const port = (http.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    calls,
    authorizations,
    notes,
    async close() {
      for (const t of timers) clearTimeout(t);
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
