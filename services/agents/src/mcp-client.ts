/**
 * The client side of MCP (CONTRACT.md 11): the official SDK over Streamable HTTP, every request through the egress
 * guard (the address checked when each socket opens, no redirects, a response size cap). One short connection per
 * operation (initialise, then list or call, then close): no session state to lose when a worker dies, and a server
 * that hangs holds nothing but its own call, which the per-call timeout ends.
 *
 * The SDK (its client, the Streamable HTTP transport and zod: ~300 ms to load) is required by the first connection:
 * the agents service starts without it, and a deployment whose agents use no MCP server never loads it.
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { EgressError, type EgressFetch } from '@svc/kit';

export interface McpToolInfo {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
  readOnly: boolean;
}

export interface McpTarget {
  url: string;
  /** The bearer token (a tenant secret's value), read at call time; never stored or logged. */
  bearer?: string;
}

/** A call that did not succeed: its message is safe to store (it never holds the token). */
export class McpCallError extends Error {}

const CLIENT_INFO = { name: 'svc-platform-agents', version: '1.0.0' };

/** At most this many tools are kept from a server's list (a run offers the allowed ones to the model). */
export const MAX_TOOLS = 200;

function describe(err: unknown, bearer: string | undefined): string {
  let message: string;
  if (err instanceof EgressError) message = `egress_refused: ${err.message}`;
  else if (err instanceof Error) {
    message = err.message || err.name;
    // undici's "fetch failed" says why in its cause (ECONNREFUSED, an egress refusal at connect time...).
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    if (cause instanceof EgressError) message = `egress_refused: ${cause.message}`;
    else if (cause) message = `${message}: ${cause.code ?? cause.message ?? 'unknown cause'}`;
  } else message = String(err);
  // Belt and braces: whatever the transport says, the token never leaves in a message.
  if (bearer) message = message.split(bearer).join('[redacted]');
  return message.slice(0, 1000);
}

export class McpConnector {
  constructor(private readonly fetch: EgressFetch) {}

  private async open(target: McpTarget, timeoutMs: number, signal?: AbortSignal): Promise<Client> {
    /* eslint-disable @typescript-eslint/no-require-imports -- deliberate lazy load */
    const { Client } = require('@modelcontextprotocol/sdk/client/index.js') as typeof import('@modelcontextprotocol/sdk/client/index.js');
    const { StreamableHTTPClientTransport } =
      require('@modelcontextprotocol/sdk/client/streamableHttp.js') as typeof import('@modelcontextprotocol/sdk/client/streamableHttp.js');
    /* eslint-enable @typescript-eslint/no-require-imports */
    const transport = new StreamableHTTPClientTransport(new URL(target.url), {
      fetch: this.fetch as never,
      requestInit: target.bearer ? { headers: { authorization: `Bearer ${target.bearer}` } } : undefined,
    });
    const client = new Client(CLIENT_INFO, { capabilities: {} });
    await client.connect(transport, { timeout: timeoutMs, signal });
    return client;
  }

  /** Initialises and lists the server's tools (every page, up to MAX_TOOLS). */
  async listTools(target: McpTarget, timeoutMs: number): Promise<McpToolInfo[]> {
    let client: Client | undefined;
    try {
      client = await this.open(target, timeoutMs);
      const out: McpToolInfo[] = [];
      let cursor: string | undefined;
      do {
        const page = await client.listTools(cursor ? { cursor } : {}, { timeout: timeoutMs });
        for (const t of page.tools) {
          if (out.length >= MAX_TOOLS) break;
          out.push({
            name: t.name,
            description: (t.description ?? '').slice(0, 2000),
            inputSchema: (t.inputSchema as Record<string, unknown>) ?? { type: 'object' },
            readOnly: t.annotations?.readOnlyHint === true,
          });
        }
        cursor = page.nextCursor;
      } while (cursor && out.length < MAX_TOOLS);
      return out;
    } catch (err) {
      throw new McpCallError(describe(err, target.bearer));
    } finally {
      await client?.close().catch(() => undefined);
    }
  }

  /**
   * Calls one tool. Resolves with the tool's result (`isError` results included: the model reads them); throws
   * McpCallError when the server cannot be reached, refuses, or does not answer within `timeoutMs` (the whole
   * operation, connection included).
   */
  async callTool(
    target: McpTarget,
    name: string,
    args: Record<string, unknown>,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<{ content: unknown; structuredContent?: unknown; isError: boolean }> {
    const timer = new AbortController();
    const t = setTimeout(() => timer.abort(new McpCallError(`timeout: the server did not answer within ${timeoutMs} ms`)), timeoutMs);
    const all = signal ? AbortSignal.any([signal, timer.signal]) : timer.signal;
    let client: Client | undefined;
    try {
      client = await this.open(target, timeoutMs, all);
      const res = await client.callTool({ name, arguments: args }, undefined, { timeout: timeoutMs, signal: all });
      return {
        content: res.content,
        ...(res.structuredContent !== undefined ? { structuredContent: res.structuredContent } : {}),
        isError: res.isError === true,
      };
    } catch (err) {
      if (timer.signal.aborted) throw new McpCallError(`timeout: the server did not answer within ${timeoutMs} ms`);
      throw new McpCallError(describe(err, target.bearer));
    } finally {
      clearTimeout(t);
      await client?.close().catch(() => undefined);
    }
  }
}
