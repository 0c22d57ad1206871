/**
 * `npm run bench` (first part): authenticated reads through the system (`GET /api/v1/tenant` and
 * `GET /api/v1/projects/:id`, answered from the gateway's cache once warm; `GET /api/v1/projects?limit=1`, one gRPC
 * call to projects and its store on every request) against two baselines, bare Fastify and
 * bare Fastify making one grpc-js call to a trivial server, measured side by side in one run with autocannon from a
 * separate process. The system is the whole of `npm start` (the compiled launcher, every service and its background
 * workers, the default layout), since their pollers compete with the request path on a small machine. A second,
 * smaller layout puts identity and the gateway in one process beside a one-process baseline. Results go to
 * bench/results/gateway-read.json, compared with the previous run's.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import {
  benchTenant,
  call,
  load,
  ROOT,
  runBench,
  runHeader,
  saveResults,
  startNpmStart,
  startProcess,
  type LoadResult,
  UNCAPPED,
} from './lib';

const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const RESULTS = resolve(ROOT, 'bench/results/gateway-read.json');
/** BENCH_ONLY=fastifyGrpc,systemProject: measure these scenarios only (a quick look; nothing is written). */
const ONLY = process.env.BENCH_ONLY?.split(',');

interface Scenario {
  key: string;
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

/** A tenant with an access token, an API key and (where projects runs) a project on the system at `port`. */
async function credentials(port: number, withProject = true) {
  const base = `http://127.0.0.1:${port}/api/v1`;
  const { accessToken, apiKey } = await benchTenant(base);
  const project = withProject ? await call(base, 'POST', '/projects', accessToken, { name: 'bench project' }) : null;
  return {
    url: `${base}/tenant`,
    projectUrl: project ? `${base}/projects/${project.id}` : '',
    accessToken,
    apiKey,
  };
}

/** The whole system as `npm start` runs it (compiled launcher, every service), embedded store, in-memory limits. */
async function startWholeSystem() {
  const { port } = await startNpmStart();
  return credentials(port);
}

/** Identity and the gateway in one process (bench/fixtures/system-one-process.ts). */
async function startOneProcessSystem() {
  const env = { DATA_DIR: mkdtempSync(join(tmpdir(), 'svc-bench-')), ...UNCAPPED };
  return credentials((await startProcess('bench/fixtures/system-one-process.ts', env)).port, false);
}

async function main() {
  console.log(`connections ${CONNECTIONS}, ${ROUNDS} rounds of ${SECONDS} s per scenario, alternating; node ${process.version}\n`);
  // Everything is up at once and measured in alternating rounds, so background load hits all of them alike.
  const bare = await startProcess('bench/fixtures/bare-fastify.ts');
  const grpcServer = await startProcess('bench/fixtures/trivial-grpc.ts');
  const front = await startProcess('bench/fixtures/fastify-grpc.ts', { TARGET: `127.0.0.1:${grpcServer.port}` });
  const frontOne = await startProcess('bench/fixtures/fastify-grpc-one-process.ts');
  const system = await startWholeSystem();
  const systemOne = await startOneProcessSystem();
  const local = (port: number) => `http://127.0.0.1:${port}/api/v1/tenant`;
  const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
  const scenarios: Scenario[] = [
    { key: 'bareFastify', name: 'bare Fastify (JSON)', url: local(bare.port), runs: [] },
    { key: 'fastifyGrpc', name: 'bare Fastify + 1 grpc-js call', url: local(front.port), runs: [] },
    { key: 'systemApiKey', name: 'system: GET /tenant, API key', url: system.url, headers: bearer(system.apiKey), runs: [] },
    { key: 'systemJwt', name: 'system: GET /tenant, access token', url: system.url, headers: bearer(system.accessToken), runs: [] },
    { key: 'systemProject', name: 'system: GET /projects/:id, API key', url: system.projectUrl, headers: bearer(system.apiKey), runs: [] },
    // Not cached by the gateway: every request reaches projects and its store.
    {
      key: 'systemProjectList',
      name: 'system: GET /projects, not cached',
      url: system.projectUrl.replace(/\/[^/]+$/, '?limit=1'),
      headers: bearer(system.apiKey),
      runs: [],
    },
    { key: 'oneProcessFastifyGrpc', name: '1 process: Fastify + grpc-js', url: local(frontOne.port), runs: [] },
    { key: 'oneProcessSystemApiKey', name: '1 process: system, API key', url: systemOne.url, headers: bearer(systemOne.apiKey), runs: [] },
    {
      key: 'oneProcessSystemJwt',
      name: '1 process: system, access token',
      url: systemOne.url,
      headers: bearer(systemOne.accessToken),
      runs: [],
    },
  ];
  for (const s of scenarios) await load(s.url, { connections: CONNECTIONS, seconds: 2, headers: s.headers }); // warm-up
  for (let round = 1; round <= ROUNDS; round++) {
    for (const s of scenarios) {
      if (ONLY && !ONLY.includes(s.key)) continue;
      const r = await load(s.url, { connections: CONNECTIONS, seconds: SECONDS, headers: s.headers });
      if (r.errors || r.non2xx) throw new Error(`${s.name}: ${r.errors} errors, ${r.non2xx} non-2xx answers`);
      s.runs.push(r);
    }
  }
  if (ONLY) {
    for (const s of scenarios.filter((x) => x.runs.length))
      console.log(s.name.padEnd(34), s.runs.map((r) => Math.round(r.rps)).join(' / '));
    return;
  }
  const by = Object.fromEntries(scenarios.map((s) => [s.key, s]));
  const summaries = Object.fromEntries(scenarios.map((s) => [s.key, summary(s)]));
  for (const s of scenarios) {
    const m = summaries[s.key];
    console.log(
      `${s.name.padEnd(34)} ${String(m.rps).padStart(7)} req/s   p50 ${String(m.p50).padStart(3)} ms   p99 ${String(m.p99).padStart(3)} ms   rounds ${m.rounds.join(' / ')}`,
    );
  }
  // Rounds run back to back, so a round's ratio compares layouts under the same background load: the median of
  // those, with their spread, says more on a shared machine than the ratio of medians.
  const paired = (a: string, b: string) => {
    const rs = by[a].runs.map((r, i) => r.rps / by[b].runs[i].rps);
    return { median: Number(median(rs).toFixed(3)), min: Number(Math.min(...rs).toFixed(3)), max: Number(Math.max(...rs).toFixed(3)) };
  };
  const ratio = (a: string, b: string) => Number((summaries[a].rps / summaries[b].rps).toFixed(3));
  const result = {
    ...runHeader({ connections: CONNECTIONS, seconds: SECONDS, rounds: ROUNDS }),
    scenarios: summaries,
    ratios: {
      systemApiKeyVsFastifyGrpc: ratio('systemApiKey', 'fastifyGrpc'),
      systemJwtVsFastifyGrpc: ratio('systemJwt', 'fastifyGrpc'),
      systemProjectVsFastifyGrpc: ratio('systemProject', 'fastifyGrpc'),
      systemProjectListVsFastifyGrpc: ratio('systemProjectList', 'fastifyGrpc'),
      fastifyGrpcVsBare: ratio('fastifyGrpc', 'bareFastify'),
      oneProcessSystemApiKeyVsFastifyGrpc: ratio('oneProcessSystemApiKey', 'oneProcessFastifyGrpc'),
      oneProcessSystemJwtVsFastifyGrpc: ratio('oneProcessSystemJwt', 'oneProcessFastifyGrpc'),
    },
    pairedRatios: {
      systemApiKeyVsFastifyGrpc: paired('systemApiKey', 'fastifyGrpc'),
      systemJwtVsFastifyGrpc: paired('systemJwt', 'fastifyGrpc'),
      systemProjectVsFastifyGrpc: paired('systemProject', 'fastifyGrpc'),
      systemProjectListVsFastifyGrpc: paired('systemProjectList', 'fastifyGrpc'),
      oneProcessSystemApiKeyVsFastifyGrpc: paired('oneProcessSystemApiKey', 'oneProcessFastifyGrpc'),
      oneProcessSystemJwtVsFastifyGrpc: paired('oneProcessSystemJwt', 'oneProcessFastifyGrpc'),
    },
  };
  console.log(
    '\nratios',
    result.ratios,
    '(targets: /tenant >= 0.85, /projects/:id >= 0.9 of Fastify+gRPC; both answered from the gateway cache, the list is not)',
  );
  console.log('per-round ratios (median, min, max)', result.pairedRatios);
  saveResults(RESULTS, result, (previous) => previous.ratios);
}

runBench(main);
