/**
 * `npm run bench:profile`: where the system's CPU goes on an authenticated read, compared with the Fastify + grpc-js
 * baseline, in the one-process layout (everything on one event loop, so every microsecond counts once). Each side is
 * profiled (V8 CPU profiler through node:inspector) while autocannon drives it; the profile's self time is summed by
 * module and divided by the requests served: CPU microseconds per request, system minus baseline. On a shared
 * machine this is steadier than req/s, and it says where to look.
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { call, load, runBench, startProcess, UNCAPPED } from './lib';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const TOP = Number(process.env.BENCH_TOP ?? 25);
/**
 * The system's route: `/tenant` (answered from the gateway's cache once warm) by default; `BENCH_PATH=/auth/me`
 * profiles a read that reaches identity and its store on every request.
 */
const PATH = process.env.BENCH_PATH ?? '/tenant';

interface CpuProfile {
  nodes: Array<{ id: number; callFrame: { functionName: string; url: string } }>;
  samples: number[];
  timeDeltas: number[];
}

function ask(proc: ChildProcess, message: object, answer: string): Promise<void> {
  return new Promise((ok) => {
    const on = (m: { type?: string }) => {
      if (m?.type !== answer) return;
      proc.off('message', on);
      ok();
    };
    proc.on('message', on);
    proc.send(message);
  });
}

/** A module's name from a profile frame's URL: the package, the repository path, or the V8 pseudo-frame. */
function moduleOf(url: string, fn: string): string {
  if (!url) return fn || '(unknown)';
  const pkg = url.split('node_modules/').pop()!;
  if (pkg !== url) return pkg.startsWith('@') ? pkg.split('/').slice(0, 2).join('/') : pkg.split('/')[0];
  const repo = url.split(`${process.cwd()}/`).pop()!;
  return repo.replace(/^file:\/\//, '');
}

/** Self time per module, in µs per request. */
function perRequest(file: string, requests: number): Map<string, number> {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(profile.nodes.map((n) => [n.id, moduleOf(n.callFrame.url, n.callFrame.functionName)]));
  const out = new Map<string, number>();
  profile.samples.forEach((id, i) => {
    const mod = byId.get(id)!;
    out.set(mod, (out.get(mod) ?? 0) + profile.timeDeltas[i] / requests);
  });
  return out;
}

async function measure(name: string, proc: ChildProcess, url: string, headers: Record<string, string>, dir: string) {
  await load(url, { connections: 50, seconds: 3, headers }); // warm-up
  const file = join(dir, `${name}.cpuprofile`);
  await ask(proc, { type: 'profile-start' }, 'profile-started');
  const r = await load(url, { connections: 50, seconds: SECONDS, headers });
  await ask(proc, { type: 'profile-stop', file }, 'profile-written');
  console.log(`${name.padEnd(9)} ${Math.round(r.rps)} req/s, ${r.requests} requests profiled`);
  return perRequest(file, r.requests);
}

async function main() {
  const dir = mkdtempSync(join(tmpdir(), 'svc-profile-'));
  const baseline = await startProcess('bench/fixtures/fastify-grpc-one-process.ts');
  const system = await startProcess('bench/fixtures/system-one-process.ts', { DATA_DIR: dir, ...UNCAPPED });
  const base = `http://127.0.0.1:${system.port}/api/v1`;
  const reg = await call(base, 'POST', '/auth/register', null, {
    email: `profile${Date.now()}@example.com`,
    password: 'bench-password',
    name: 'Bench',
    tenantName: 'Bench',
  });
  const { key } = await call(base, 'POST', '/api-keys', reg.accessToken, { name: 'bench', type: 'sdk', environment: 'production' });
  const a = await measure('baseline', baseline.proc, `http://127.0.0.1:${baseline.port}/api/v1/tenant`, {}, dir);
  console.log(`system route: GET /api/v1${PATH}`);
  const b = await measure('system', system.proc, `${base}${PATH}`, { authorization: `Bearer ${key}` }, dir);
  const busy = (m: Map<string, number>) => [...m].filter(([k]) => k !== '(idle)').reduce((sum, [, v]) => sum + v, 0);
  console.log(`\nCPU µs per request (idle left out): baseline ${busy(a).toFixed(0)}, system ${busy(b).toFixed(0)}\n`);
  const rows = [...new Set([...a.keys(), ...b.keys()])]
    .filter((k) => k !== '(idle)')
    .map((k) => ({ module: k, baseline: a.get(k) ?? 0, system: b.get(k) ?? 0 }))
    .sort((x, y) => y.system - y.baseline - (x.system - x.baseline));
  console.log('   +µs  baseline    system  module');
  for (const r of rows.slice(0, TOP))
    console.log(
      `${(r.system - r.baseline).toFixed(1).padStart(6)}  ${r.baseline.toFixed(1).padStart(8)}  ${r.system.toFixed(1).padStart(8)}  ${r.module}`,
    );
  console.log(`\nprofiles in ${dir} (open them in Chrome DevTools, Performance tab)`);
}

runBench(main);
