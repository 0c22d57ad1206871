/**
 * `npm run bench`: an authenticated read through the whole system against two baselines, measured side by side
 * in one run with autocannon from a separate process. Every layout uses separate processes for the HTTP front
 * and the gRPC back end, as the system does. Results are written to bench/results/ and compared with the
 * previous run's file.
 */
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { load, ROOT, startProcess, stopAll, type LoadResult } from './lib';

const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const RESULTS = resolve(ROOT, 'bench/results/gateway-read.json');

async function measure(name: string, url: string, headers?: Record<string, string>): Promise<LoadResult> {
  await load(url, { connections: CONNECTIONS, seconds: 2, headers }); // warm-up: JIT, caches, connections
  const r = await load(url, { connections: CONNECTIONS, seconds: SECONDS, headers });
  console.log(`${name.padEnd(34)} ${r.rps.toFixed(0).padStart(7)} req/s   p50 ${String(r.p50).padStart(3)} ms   p99 ${String(r.p99).padStart(3)} ms   errors ${r.errors} non2xx ${r.non2xx}`);
  if (r.errors || r.non2xx) throw new Error(`${name}: ${r.errors} errors, ${r.non2xx} non-2xx answers`);
  return r;
}

async function main() {
  console.log(`connections ${CONNECTIONS}, ${SECONDS} s per scenario, node ${process.version}\n`);

  const bare = await startProcess('bench/fixtures/bare-fastify.ts');
  const bareResult = await measure('bare Fastify (JSON)', `http://127.0.0.1:${bare.port}/api/v1/tenant`);
  bare.proc.kill();

  const grpcServer = await startProcess('bench/fixtures/trivial-grpc.ts');
  const front = await startProcess('bench/fixtures/fastify-grpc.ts', { TARGET: `127.0.0.1:${grpcServer.port}` });
  const grpcResult = await measure('bare Fastify + 1 grpc-js call', `http://127.0.0.1:${front.port}/api/v1/tenant`);
  front.proc.kill();
  grpcServer.proc.kill();

  // The system under test: identity and the gateway as separate processes, embedded store, in-memory limits.
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-'));
  const env = { DATA_DIR: dataDir, RATE_LIMIT_MAX: '100000000' };
  const identity = await startProcess('services/identity/src/main.ts', { ...env, IDENTITY_PORT: '0' });
  const gateway = await startProcess('gateway/src/main.ts', { ...env, PORT: '0', IDENTITY_ADDR: `127.0.0.1:${identity.port}` });
  const base = `http://127.0.0.1:${gateway.port}/api/v1`;
  const reg = await fetch(`${base}/auth/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: `bench${Date.now()}@example.com`, password: 'bench-password', name: 'Bench', tenantName: 'Bench' }),
  }).then((r) => r.json() as Promise<{ data: { accessToken: string } }>);
  const key = await fetch(`${base}/api-keys`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${reg.data.accessToken}` },
    body: JSON.stringify({ name: 'bench', type: 'sdk', environment: 'production' }),
  }).then((r) => r.json() as Promise<{ data: { key: string } }>);
  const systemKey = await measure('system: GET /tenant, API key', `${base}/tenant`, { authorization: `Bearer ${key.data.key}` });
  const systemJwt = await measure('system: GET /tenant, access token', `${base}/tenant`, { authorization: `Bearer ${reg.data.accessToken}` });

  const ratio = (a: LoadResult, b: LoadResult) => Number((a.rps / b.rps).toFixed(3));
  const result = {
    date: new Date().toISOString(),
    node: process.version,
    connections: CONNECTIONS,
    seconds: SECONDS,
    scenarios: { bareFastify: bareResult, fastifyGrpc: grpcResult, systemApiKey: systemKey, systemJwt },
    ratios: {
      systemApiKeyVsFastifyGrpc: ratio(systemKey, grpcResult),
      systemJwtVsFastifyGrpc: ratio(systemJwt, grpcResult),
      fastifyGrpcVsBare: ratio(grpcResult, bareResult),
    },
  };
  console.log('\nratios', result.ratios, '(target: system / Fastify+gRPC >= 0.85)');
  if (existsSync(RESULTS)) {
    const previous = JSON.parse(readFileSync(RESULTS, 'utf8')) as typeof result;
    console.log(`previous run (${previous.date}):`, previous.ratios);
  }
  writeFileSync(RESULTS, JSON.stringify(result, null, 2) + '\n');
  console.log(`written to ${RESULTS}`);
}

main()
  .catch((err: Error) => {
    console.error(err.message);
    process.exitCode = 1;
  })
  .finally(() => {
    stopAll();
    setTimeout(() => process.exit(), 500).unref();
  });
