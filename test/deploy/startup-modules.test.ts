/**
 * Start-up loads only what the configuration uses (decision 85). `npm start`'s compiled processes (dist/, built by
 * the jest global set-up) in the embedded default (SQLite, embedded bus, no Redis, no Stripe, no provider called)
 * must not load the packages only other configurations or later calls need: loading them cost the services process
 * ~700 ms and the gateway ~600 ms of start-up. Each process writes what it has loaded when asked
 * (test/helpers/loaded-packages.cjs, a preload); the lazy loads are then shown to work from the bundles: the first
 * `/mcp` request loads the MCP SDK in the gateway, registering an MCP server loads its client in the services.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { client, createKey, eventually, signUp } from '../helpers/http';
import { startTestMcpServer, type TestMcpServer } from '../helpers/mcp-server';
import { childPids, startSystem, type SystemProcess } from '../helpers/process';

jest.setTimeout(120_000);

const PRELOAD = resolve(__dirname, '../helpers/loaded-packages.cjs');

/** Needed only by configurations other than the default, or by a call that has not been made. */
const NOT_AT_START = [
  'mongoose', // MONGODB_URI
  'kafkajs', // KAFKA_BROKERS
  'ioredis', // REDIS_URL
  '@aws-sdk/client-s3', // a storage check for s3, r2 or gcs
  '@azure/storage-blob', // a storage check for azure
  'stripe', // STRIPE_SECRET_KEY
  'openai', // a call to an OpenAI or compatible provider
  '@anthropic-ai/sdk', // a call to Anthropic
  '@modelcontextprotocol/sdk', // an MCP server registered or called, or a /mcp request
  'zod', // through the MCP SDK
  '@grpc/reflection', // the first reflection call
  // The health service's .proto, parsed with protobufjs: only reflection reads it (kit's health.ts serves health).
  'grpc-health-check',
  '@grpc/proto-loader',
  'protobufjs',
  '@opentelemetry/core', // traces exported (OTEL_*)
];
/** The gateway serves no gRPC. */
const NOT_IN_GATEWAY = NOT_AT_START;
/** The services' outbound HTTP (providers, webhooks, MCP servers: undici) and MCP tools' argument checks (ajv). */
const NOT_IN_SERVICES = [...NOT_AT_START, 'undici', 'ajv'];

let dataDir: string;
let loadedDir: string;
let system: SystemProcess | null = null;
let mcp: TestMcpServer;

/** The packages the process running `entry` has loaded so far (asked with SIGUSR2, answered by the preload). */
async function loadedBy(entry: string): Promise<string[]> {
  const pids = childPids(system!.proc.pid!, entry);
  expect(pids).toHaveLength(1);
  const file = join(loadedDir, `${pids[0]}.json`);
  rmSync(file, { force: true });
  process.kill(pids[0], 'SIGUSR2');
  let report: { entry: string; packages: string[] } | undefined;
  await eventually(async () => {
    try {
      report = JSON.parse(readFileSync(file, 'utf8'));
      return true;
    } catch {
      return false;
    }
  }, 5000);
  expect(report!.entry).toMatch(new RegExp(`${entry.replace('.', '\\.')}$`));
  return report!.packages;
}

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'svc-startup-modules-'));
  loadedDir = mkdtempSync(join(tmpdir(), 'svc-loaded-packages-'));
  mcp = await startTestMcpServer();
  system = await startSystem({
    DATA_DIR: dataDir,
    EGRESS_ALLOW_PRIVATE: 'true',
    LOADED_PACKAGES_DIR: loadedDir,
    NODE_OPTIONS: `--require ${PRELOAD}`,
  });
});

afterAll(async () => {
  if (system) await system.stop().catch(() => undefined);
  await mcp?.close();
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(loadedDir, { recursive: true, force: true });
});

describe('npm start, embedded default', () => {
  it('starts the services and the gateway without the packages their configuration does not use', async () => {
    const api = client(system!.url);
    // Ready, and a sign-up served end to end: the start paths and a first request have run.
    expect((await api.get('/readyz')).status).toBe(200);
    await signUp(api, 'Lean');

    const services = await loadedBy('dist/services.js');
    const gateway = await loadedBy('dist/gateway.js');
    // The probe sees what they load (/readyz above had every service's gRPC health answer).
    expect(services).toEqual(expect.arrayContaining(['@grpc/grpc-js', 'better-sqlite3']));
    expect(gateway).toEqual(expect.arrayContaining(['@grpc/grpc-js', 'fastify']));
    expect(services.filter((p) => NOT_IN_SERVICES.includes(p))).toEqual([]);
    expect(gateway.filter((p) => NOT_IN_GATEWAY.includes(p))).toEqual([]);
  });

  it('loads the MCP SDK from the bundles when it is first needed: a /mcp request, an MCP server registered', async () => {
    const api = client(system!.url);
    const owner = await signUp(api, 'Lazy');
    const { key } = await createKey(api, owner.accessToken);
    const res = await fetch(`${system!.url}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${key}` },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'startup-modules', version: '1' } },
      }),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { result: { serverInfo: { name: string } } }).result.serverInfo.name).toBe('svc-platform');
    expect(await loadedBy('dist/gateway.js')).toContain('@modelcontextprotocol/sdk');

    const server = await api.post('/api/v1/mcp-servers', { name: 'notes', url: mcp.url }, { token: owner.accessToken });
    expect(server.status).toBe(201);
    // Connected and listed with the SDK's client (an unreachable server would be 201 with status "error").
    expect(server.body.data).toMatchObject({ status: 'ready', error: null });
    expect(server.body.data.tools.length).toBeGreaterThan(0);
    expect(await loadedBy('dist/services.js')).toContain('@modelcontextprotocol/sdk');
  });
});
