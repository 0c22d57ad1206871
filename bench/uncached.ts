/**
 * `npm run bench:uncached` (part of `npm run bench`): the paths the gateway's caches do not answer, on the whole
 * system as `npm start` runs it (compiled launcher, every service and its background workers), beside the baseline
 * of bare Fastify making one unary grpc-js call, in alternating rounds of one run:
 * - `GET /projects?limit=20` in a tenant holding 201 projects (one gRPC call to projects and a store query a request);
 * - `POST /projects` (a transaction with the tenant's cap, the outbox, then the relay) in a tenant of its own;
 * - `PATCH /projects/:id` (a transaction, the outbox, the change feed, the cache eviction);
 * - `GET /projects/:id` and `GET /tenant`, answered from the gateway's caches, so that a change here cannot lower them
 *   unseen.
 * A second baseline answers the list's payload (a constant page of 20 projects through the same Fastify + grpc-js
 * pair): the list's distance from it is what the system adds, apart from the size of the answer.
 * Beside req/s and latency, each scenario reports the server's CPU time per request: the CPU-seconds of every
 * process of the system's tree (or of the baseline's two processes) over the window, divided by the requests
 * served. Results go to bench/results/uncached.json, printed beside the previous run's.
 */
import { resolve } from 'node:path';
import {
  benchTenant,
  call,
  load,
  processLabel,
  processTree,
  ROOT,
  runBench,
  runHeader,
  saveResults,
  startNpmStart,
  startProcess,
  TICKS,
  type LoadResult,
} from './lib';

const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const RESULTS = resolve(ROOT, 'bench/results/uncached.json');
/** BENCH_ONLY=baseline,list: these scenarios only (a quick look; nothing is written). */
const ONLY = process.env.BENCH_ONLY?.split(',');
/**
 * BENCH_BEFORE=<another checkout of this repository, built and installed>: its system is started too and measured in
 * the same rounds (scenario keys prefixed `before.`), to compare a change with the commit before it.
 */
const BEFORE = process.env.BENCH_BEFORE;
/**
 * BENCH_BEFORE_ENV='NAME=value ...': settings for the `before.` system only (with BENCH_BEFORE=. it is this checkout
 * under other settings, e.g. `NODE_OPTIONS=--max-semi-space-size=64`).
 */
const BEFORE_ENV = Object.fromEntries(
  (process.env.BENCH_BEFORE_ENV ?? '')
    .split(' ')
    .filter(Boolean)
    .map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]),
);

interface Scenario {
  key: string;
  name: string;
  url: string;
  method?: string;
  body?: string;
  headers: Record<string, string>;
  /** processes whose CPU counts as the server's */
  pids: number[];
  runs: Array<LoadResult & { cpuUsPerRequest: number; byProcess: Record<string, number> }>;
}

/** CPU ticks of each process of the trees, keyed by pid, with its short name. */
function cpuByProcess(pids: number[]): Map<number, { name: string; ticks: number }> {
  return new Map(processTree(...pids).map((p) => [p.pid, { name: processLabel(p.command), ticks: p.cpuTicks }]));
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function measure(s: Scenario, seconds: number) {
  const before = cpuByProcess(s.pids);
  const r = await load(s.url, { connections: CONNECTIONS, seconds, headers: s.headers, method: s.method, body: s.body });
  const after = cpuByProcess(s.pids);
  if (r.errors || r.non2xx) throw new Error(`${s.name}: ${r.errors} errors, ${r.non2xx} non-2xx answers`);
  // Per process (the gateway, the services, the launcher): which one a scenario loads.
  const byProcess: Record<string, number> = {};
  for (const [pid, { name, ticks }] of after) {
    const us = ((ticks - (before.get(pid)?.ticks ?? 0)) / TICKS) * (1e6 / r.requests);
    byProcess[name] = (byProcess[name] ?? 0) + us;
  }
  const cpuUsPerRequest = Object.values(byProcess).reduce((sum, us) => sum + us, 0);
  return { ...r, cpuUsPerRequest, byProcess };
}

/** The scenarios of one running system: two tenants (one keeps 201 projects to list, one takes the writes). */
async function systemScenarios(system: { port: number; pid: number }, key: string, name: string): Promise<Scenario[]> {
  const base = `http://127.0.0.1:${system.port}/api/v1`;
  const tenant = async () => {
    const { accessToken, apiKey } = await benchTenant(base);
    return { accessToken, auth: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' } };
  };
  const lister = await tenant();
  const writer = await tenant();
  let last = '';
  for (let i = 0; i < 201; i++) last = (await call(base, 'POST', '/projects', lister.accessToken, { name: `project ${i}` })).id;
  const patched = (await call(base, 'POST', '/projects', writer.accessToken, { name: 'patched' })).id;
  const pids = [system.pid];
  return [
    {
      key: `${key}list`,
      name: `${name}GET /projects?limit=20 (201)`,
      url: `${base}/projects?limit=20`,
      headers: lister.auth,
      pids,
      runs: [],
    },
    {
      key: `${key}create`,
      name: `${name}POST /projects`,
      url: `${base}/projects`,
      method: 'POST',
      body: JSON.stringify({ name: 'created by the bench', description: 'a project', language: 'en' }),
      headers: writer.auth,
      pids,
      runs: [],
    },
    {
      key: `${key}update`,
      name: `${name}PATCH /projects/:id`,
      url: `${base}/projects/${patched}`,
      method: 'PATCH',
      body: JSON.stringify({ description: 'changed by the bench' }),
      headers: writer.auth,
      pids,
      runs: [],
    },
    {
      key: `${key}getCached`,
      name: `${name}GET /projects/:id (cached)`,
      url: `${base}/projects/${last}`,
      headers: lister.auth,
      pids,
      runs: [],
    },
    { key: `${key}tenantCached`, name: `${name}GET /tenant (cached)`, url: `${base}/tenant`, headers: lister.auth, pids, runs: [] },
  ];
}

/**
 * The order of a round: each scenario of the `before.` system right beside its counterpart, the two taking turns to go
 * first, so that neither always runs after the other's writes. Check a comparison against itself (BENCH_BEFORE=.):
 * on this machine, with the write scenarios in the rounds, the second system's cached reads still cost up to twice the
 * gateway CPU of the first's, the same code (and the same when only the cached reads run).
 */
function inRound(scenarios: Scenario[], round: number): Scenario[] {
  const out: Scenario[] = [];
  for (const s of scenarios) {
    if (s.key.startsWith('before.')) continue;
    const other = scenarios.find((b) => b.key === `before.${s.key}`);
    out.push(...(!other ? [s] : round % 2 ? [other, s] : [s, other]));
  }
  return out;
}

async function main() {
  console.log(`connections ${CONNECTIONS}, ${ROUNDS} rounds of ${SECONDS} s per scenario, alternating; node ${process.version}\n`);
  const grpcServer = await startProcess('bench/fixtures/trivial-grpc.ts');
  const front = await startProcess('bench/fixtures/fastify-grpc.ts', { TARGET: `127.0.0.1:${grpcServer.port}` });
  const baselinePids = [grpcServer.proc.pid!, front.proc.pid!];
  const scenarios: Scenario[] = [
    {
      key: 'baseline',
      name: 'Fastify + 1 grpc-js call',
      url: `http://127.0.0.1:${front.port}/api/v1/tenant`,
      headers: {},
      pids: baselinePids,
      runs: [],
    },
    // The same, answering the list's payload (20 projects, mapped to the view): what the list costs by its size alone.
    {
      key: 'baselineList',
      name: 'the same, 20 projects',
      url: `http://127.0.0.1:${front.port}/api/v1/projects`,
      headers: {},
      pids: baselinePids,
      runs: [],
    },
    ...(await systemScenarios(await startNpmStart(), '', '')),
    ...(BEFORE ? await systemScenarios(await startNpmStart(resolve(BEFORE), BEFORE_ENV), 'before.', 'before: ') : []),
  ].filter((s) => !ONLY || ONLY.includes(s.key.replace(/^before\./, '')));

  for (const s of inRound(scenarios, 0)) await measure(s, 2); // warm-up
  for (let round = 1; round <= ROUNDS; round++) for (const s of inRound(scenarios, round)) s.runs.push(await measure(s, SECONDS));

  const summaries = Object.fromEntries(
    scenarios.map((s) => [
      s.key,
      {
        rps: Math.round(median(s.runs.map((r) => r.rps))),
        p50: median(s.runs.map((r) => r.p50)),
        p99: median(s.runs.map((r) => r.p99)),
        cpuUsPerRequest: Math.round(median(s.runs.map((r) => r.cpuUsPerRequest))),
        cpuUsByProcess: Object.fromEntries(
          Object.keys(s.runs[0].byProcess).map((name) => [name, Math.round(median(s.runs.map((r) => r.byProcess[name] ?? 0)))]),
        ),
        rounds: s.runs.map((r) => Math.round(r.rps)),
      },
    ]),
  );
  const baseline = scenarios.find((s) => s.key === 'baseline');
  // Rounds run back to back, so a round's ratio compares under the same background load.
  const vsBaseline = (s: Scenario) =>
    baseline
      ? {
          rps: Number(median(s.runs.map((r, i) => r.rps / baseline.runs[i].rps)).toFixed(3)),
          cpu: Number(median(s.runs.map((r, i) => r.cpuUsPerRequest / baseline.runs[i].cpuUsPerRequest)).toFixed(2)),
        }
      : null;
  console.log('scenario                          req/s    p50    p99   CPU µs/req   vs baseline: req/s, CPU');
  for (const s of scenarios) {
    const m = summaries[s.key];
    const v = vsBaseline(s);
    console.log(
      `${s.name.padEnd(32)} ${String(m.rps).padStart(6)} ${String(m.p50).padStart(5)} ${String(m.p99).padStart(6)} ${String(m.cpuUsPerRequest).padStart(12)}   ${v ? `${v.rps} x, ${v.cpu} x` : ''}`,
    );
  }
  console.log('\nCPU µs per request by process');
  for (const s of scenarios) {
    const parts = Object.entries(summaries[s.key].cpuUsByProcess).filter(([, us]) => us > 0);
    console.log(`${s.name.padEnd(32)} ${parts.map(([name, us]) => `${name} ${us}`).join(', ')}`);
  }
  if (ONLY) return;
  const result = {
    ...runHeader({ connections: CONNECTIONS, seconds: SECONDS, rounds: ROUNDS }),
    scenarios: summaries,
    vsBaseline: Object.fromEntries(scenarios.map((s) => [s.key, vsBaseline(s)])),
  };
  console.log("\ntargets: list >= 0.85 x and create >= 0.7 x the baseline's req/s; CPU per request within 1.3 x");
  saveResults(RESULTS, result, (previous) => previous.vsBaseline);
}

runBench(main);
