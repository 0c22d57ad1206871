/**
 * `npm run bench:regions`: feature-check latency through the gateway (GET /regions/features/:tenantId/check/:key),
 * beside a baseline measured in the same run on the same processes: GET /auth/me (gateway -> identity, one gRPC call
 * and its store on every request, the same credential path; GET /tenant would be a hit in the gateway's cache). Both with an API key at a modest load (autocannon as a separate process), in
 * alternating rounds so machine noise hits both alike. Every service is its own process, as `npm start` runs them.
 * Results go to bench/results/regions.json.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { call, load, ROOT, runBench, startProcess, stopAll, type LoadResult, UNCAPPED } from './lib';

const RESULTS = resolve(ROOT, 'bench/results/regions.json');
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 10);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);

async function startSystem(dataDir: string): Promise<string> {
  const env = { DATA_DIR: dataDir, ...UNCAPPED };
  const identity = await startProcess('services/identity/src/main.ts', { ...env, IDENTITY_PORT: '0' });
  const peers = { ...env, IDENTITY_ADDR: `127.0.0.1:${identity.port}` };
  const regions = await startProcess('services/regions/src/main.ts', { ...peers, REGIONS_PORT: '0' });
  const gateway = await startProcess('gateway/src/main.ts', { ...peers, PORT: '0', REGIONS_ADDR: `127.0.0.1:${regions.port}` });
  return `http://127.0.0.1:${gateway.port}/api/v1`;
}

const summary = (runs: LoadResult[]) => ({
  rps: Math.round(runs.reduce((a, r) => a + r.rps, 0) / runs.length),
  p50: Math.max(...runs.map((r) => r.p50)),
  p99: Math.max(...runs.map((r) => r.p99)),
  errors: runs.reduce((a, r) => a + r.errors + r.non2xx, 0),
  rounds: runs.map((r) => ({ rps: Math.round(r.rps), p50: r.p50, p99: r.p99 })),
});

runBench(async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-regions-'));
  try {
    const base = await startSystem(dataDir);
    const reg = await call(base, 'POST', '/auth/register', null, {
      email: `bench${Date.now()}@example.com`,
      password: 'correct horse battery',
      name: 'Bench',
      tenantName: 'Bench',
    });
    const key = (await call(base, 'POST', '/api-keys', reg.accessToken, { name: 'bench', type: 'sdk', environment: 'development' })).key;
    const headers = { authorization: `Bearer ${key}` };
    const featureUrl = `${base}/regions/features/${reg.tenant.id}/check/secondary_region`;
    const check = await call(base, 'GET', `/regions/features/${reg.tenant.id}/check/secondary_region`, key);
    if (check.requiredPlan !== 'growth') throw new Error(`unexpected feature check answer ${JSON.stringify(check)}`);
    // Warm both paths (credential cache, gRPC channels, JIT).
    await load(`${base}/auth/me`, { connections: CONNECTIONS, seconds: 1, headers });
    await load(featureUrl, { connections: CONNECTIONS, seconds: 1, headers });
    const baseline: LoadResult[] = [];
    const feature: LoadResult[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      baseline.push(await load(`${base}/auth/me`, { connections: CONNECTIONS, seconds: SECONDS, headers }));
      feature.push(await load(featureUrl, { connections: CONNECTIONS, seconds: SECONDS, headers }));
    }
    const result = {
      at: new Date().toISOString(),
      connections: CONNECTIONS,
      secondsPerRound: SECONDS,
      credential: 'api key',
      baselineGetMe: summary(baseline),
      featureCheck: summary(feature),
    };
    writeFileSync(RESULTS, JSON.stringify(result, null, 2) + '\n');
    console.log(JSON.stringify(result, null, 2));
  } finally {
    stopAll();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
