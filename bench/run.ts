/**
 * `npm run bench`: an authenticated read through the whole system against two baselines, measured side by side
 * in one run with autocannon from a separate process. Every layout uses separate processes for the HTTP front
 * and the gRPC back end, as the system does. Results are written to bench/results/ and compared with the
 * previous run's file.
 */
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { load, ROOT, runBench, startProcess, type LoadResult } from './lib';

const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const RESULTS = resolve(ROOT, 'bench/results/gateway-read.json');

interface Scenario {
  name: string;
  url: string;
  headers?: Record<string, string>;
  runs: LoadResult[];
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

function summary(s: Scenario) {
  return {
    rps: Math.round(median(s.runs.map((r) => r.rps))),
    p50: median(s.runs.map((r) => r.p50)),
    p99: median(s.runs.map((r) => r.p99)),
    rounds: s.runs.map((r) => Math.round(r.rps)),
  };
}

/** Starts the system under test: identity and the gateway as separate processes, embedded store, in-memory limits. */
async function startSystem() {
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
  return { base, accessToken: reg.data.accessToken, apiKey: key.data.key };
}

async function main() {
  console.log(`connections ${CONNECTIONS}, ${ROUNDS} rounds of ${SECONDS} s per scenario, alternating; node ${process.version}\n`);
  // Every layout is up at once and measured in alternating rounds, so background load hits all of them alike.
  const bare = await startProcess('bench/fixtures/bare-fastify.ts');
  const grpcServer = await startProcess('bench/fixtures/trivial-grpc.ts');
  const front = await startProcess('bench/fixtures/fastify-grpc.ts', { TARGET: `127.0.0.1:${grpcServer.port}` });
  const system = await startSystem();
  const scenarios: Scenario[] = [
    { name: 'bare Fastify (JSON)', url: `http://127.0.0.1:${bare.port}/api/v1/tenant`, runs: [] },
    { name: 'bare Fastify + 1 grpc-js call', url: `http://127.0.0.1:${front.port}/api/v1/tenant`, runs: [] },
    { name: 'system: GET /tenant, API key', url: `${system.base}/tenant`, headers: { authorization: `Bearer ${system.apiKey}` }, runs: [] },
    {
      name: 'system: GET /tenant, access token',
      url: `${system.base}/tenant`,
      headers: { authorization: `Bearer ${system.accessToken}` },
      runs: [],
    },
  ];
  for (const s of scenarios) await load(s.url, { connections: CONNECTIONS, seconds: 2, headers: s.headers }); // warm-up
  for (let round = 1; round <= ROUNDS; round++) {
    for (const s of scenarios) {
      const r = await load(s.url, { connections: CONNECTIONS, seconds: SECONDS, headers: s.headers });
      if (r.errors || r.non2xx) throw new Error(`${s.name}: ${r.errors} errors, ${r.non2xx} non-2xx answers`);
      s.runs.push(r);
    }
  }
  const [bareS, grpcS, keyS, jwtS] = scenarios.map(summary);
  for (const [i, s] of scenarios.entries()) {
    const m = [bareS, grpcS, keyS, jwtS][i];
    console.log(
      `${s.name.padEnd(34)} ${String(m.rps).padStart(7)} req/s   p50 ${String(m.p50).padStart(3)} ms   p99 ${String(m.p99).padStart(3)} ms   rounds ${m.rounds.join(' / ')}`,
    );
  }
  const ratio = (a: { rps: number }, b: { rps: number }) => Number((a.rps / b.rps).toFixed(3));
  // Rounds run back to back, so a round's ratio compares layouts under the same background load: the median of
  // those, with their spread, says more on a shared machine than the ratio of medians.
  const paired = (a: Scenario, b: Scenario) => {
    const rs = a.runs.map((r, i) => r.rps / b.runs[i].rps);
    return { median: Number(median(rs).toFixed(3)), min: Number(Math.min(...rs).toFixed(3)), max: Number(Math.max(...rs).toFixed(3)) };
  };
  const [, grpcScenario, keyScenario, jwtScenario] = scenarios;
  const result = {
    date: new Date().toISOString(),
    node: process.version,
    connections: CONNECTIONS,
    seconds: SECONDS,
    rounds: ROUNDS,
    scenarios: { bareFastify: bareS, fastifyGrpc: grpcS, systemApiKey: keyS, systemJwt: jwtS },
    ratios: {
      systemApiKeyVsFastifyGrpc: ratio(keyS, grpcS),
      systemJwtVsFastifyGrpc: ratio(jwtS, grpcS),
      fastifyGrpcVsBare: ratio(grpcS, bareS),
    },
    pairedRatios: {
      systemApiKeyVsFastifyGrpc: paired(keyScenario, grpcScenario),
      systemJwtVsFastifyGrpc: paired(jwtScenario, grpcScenario),
    },
  };
  console.log('\nratios', result.ratios, '(target: system / Fastify+gRPC >= 0.85)');
  console.log('per-round ratios (median, min, max)', result.pairedRatios);
  if (existsSync(RESULTS)) {
    const previous = JSON.parse(readFileSync(RESULTS, 'utf8')) as typeof result;
    console.log(`previous run (${previous.date}):`, previous.ratios);
  }
  writeFileSync(RESULTS, JSON.stringify(result, null, 2) + '\n');
  console.log(`written to ${RESULTS}`);
}

runBench(main);
