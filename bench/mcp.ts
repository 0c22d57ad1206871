/**
 * The per-call overhead the platform adds over calling an MCP server directly: a tool call as a run makes it
 * (`McpConnector.callTool`: a new Streamable HTTP connection through the egress guard, initialise, call, close)
 * beside the baseline of one SDK client kept open calling the same tool, against a local SDK-built server that
 * answers at once. Sequential calls, so each figure is one call's latency. Schema checks (ajv, compiled once per
 * tool) and the step's store write are not included: the first is microseconds, the second is any step's cost.
 */
import { writeFileSync, mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { egressFetch } from '@svc/kit';
import { McpConnector } from '../services/agents/src/mcp-client';
import { startTestMcpServer } from '../test/helpers/mcp-server';

const CALLS = Number(process.env.BENCH_MCP_CALLS ?? 500);
const RESULTS = resolve(__dirname, 'results/mcp.json');

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const r2 = (x: number) => Math.round(x * 100) / 100;
const stats = (xs: number[]) => ({ p50: r2(pct(xs, 50)), p99: r2(pct(xs, 99)), mean: r2(xs.reduce((a, b) => a + b, 0) / xs.length) });

async function time(n: number, fn: () => Promise<unknown>): Promise<number[]> {
  for (let i = 0; i < Math.min(50, n); i++) await fn(); // warm-up
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await fn();
    out.push(performance.now() - t);
  }
  return out;
}

async function main() {
  const server = await startTestMcpServer();
  const direct = new Client({ name: 'bench', version: '1.0.0' });
  await direct.connect(new StreamableHTTPClientTransport(new URL(server.url)));
  const baseline = await time(CALLS, () => direct.callTool({ name: 'lookup', arguments: { q: 'x' } }));
  await direct.close();

  const connector = new McpConnector(egressFetch({ allowPrivate: true, maxResponseBytes: 1024 * 1024 }));
  const platform = await time(CALLS, () => connector.callTool({ url: server.url, bearer: 'bench-token' }, 'lookup', { q: 'x' }, 30_000));
  await server.close();

  const result = {
    at: new Date().toISOString(),
    calls: CALLS,
    directMs: stats(baseline),
    platformMs: stats(platform),
    overheadP50Ms: r2(pct(platform, 50) - pct(baseline, 50)),
  };
  mkdirSync(dirname(RESULTS), { recursive: true });
  writeFileSync(RESULTS, JSON.stringify(result, null, 2) + '\n');
  console.log(JSON.stringify(result, null, 2));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
