/**
 * `npm run bench:footprint` (part of `npm run bench`): the whole `npm start` tree as a user runs it (npm, the
 * launcher, every service, the gateway, and whatever they spawn), measured from outside through /proc, in both
 * layouts in the same run: `combined` (the default: the services share a process) beside `per-service` (one process
 * each, as deploy/ runs them), which is the baseline:
 * - start-up: from spawning `npm start` to the first `GET /readyz` 200;
 * - idle CPU: CPU-seconds of every process of the tree over IDLE_SECONDS of nothing happening, as % of one core, in
 *   two windows one after the other: right after start-up (SETTLE_SECONDS after ready), and steady idle after that;
 * - idle memory: RSS summed over the tree (as `ps` shows it; shared pages count once per process) and PSS
 *   (shared pages divided among their users: what the tree really costs the machine).
 * Results go to bench/results/footprint.json, printed beside the previous run's.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { processLabel, processTree as tree, ROOT, runBench, TICKS } from './lib';
import { freePort } from '../test/helpers/redis';

const IDLE_SECONDS = Number(process.env.BENCH_IDLE_SECONDS ?? 20);
const SETTLE_SECONDS = Number(process.env.BENCH_SETTLE_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_FOOTPRINT_ROUNDS ?? 2);
const RESULTS = resolve(ROOT, 'bench/results/footprint.json');
function memoryKb(pid: number): { rss: number; pss: number } {
  try {
    const text = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
    const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? 0);
    return { rss: field('Rss'), pss: field('Pss') };
  } catch {
    return { rss: 0, pss: 0 };
  }
}

const sleep = (ms: number) => new Promise((ok) => setTimeout(ok, ms));

async function waitReady(url: string, deadline: number): Promise<void> {
  while (Date.now() < deadline) {
    try {
      const res = await fetch(url);
      if (res.status === 200) return;
    } catch {
      // not listening yet
    }
    await sleep(25);
  }
  throw new Error(`${url} not 200 in time`);
}

/** CPU-seconds of the tree rooted at `root` over `windowSeconds`, with each process's share and memory at the end. */
async function cpuOver(root: number, windowSeconds: number) {
  const before = tree(root);
  const t0 = process.hrtime.bigint();
  await sleep(windowSeconds * 1000);
  const after = tree(root);
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const ticksBefore = new Map(before.map((p) => [p.pid, p.cpuTicks]));
  const processes = after.map((p) => {
    const mem = memoryKb(p.pid);
    const cpuSeconds = (p.cpuTicks - (ticksBefore.get(p.pid) ?? 0)) / TICKS;
    return { name: processLabel(p.command), cpuSeconds, rssMb: mem.rss / 1024, pssMb: mem.pss / 1024 };
  });
  return { seconds, processes, cpuSeconds: processes.reduce((a, p) => a + p.cpuSeconds, 0) };
}

const LAYOUTS = ['combined', 'per-service'] as const;
type Layout = (typeof LAYOUTS)[number];

async function round(layout: Layout) {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-footprint-'));
  const port = await freePort();
  const started = Date.now();
  const npm = spawn('npm', ['start'], {
    cwd: ROOT,
    env: { ...process.env, PORT: String(port), DATA_DIR: dataDir, LOG_LEVEL: 'warn', SVC_LAYOUT: layout },
    stdio: ['ignore', 'ignore', 'inherit'],
    detached: true,
  });
  try {
    await waitReady(`http://127.0.0.1:${port}/readyz`, started + 60_000);
    const startupMs = Date.now() - started;
    await sleep(SETTLE_SECONDS * 1000);
    // Window 1: right after start-up (it holds V8's one-time post-start compaction, ~8 s after allocation calms).
    const early = await cpuOver(npm.pid!, IDLE_SECONDS);
    // Window 2, straight after: steady idle, what a laptop pays for as long as the system runs.
    const steady = await cpuOver(npm.pid!, IDLE_SECONDS);
    const processes = steady.processes;
    const sum = (f: (p: (typeof processes)[number]) => number) => processes.reduce((a, p) => a + f(p), 0);
    return {
      startupMs,
      idleCpuSeconds: +steady.cpuSeconds.toFixed(2),
      idleCpuPercent: +((steady.cpuSeconds / steady.seconds) * 100).toFixed(2),
      afterStartCpuPercent: +((early.cpuSeconds / early.seconds) * 100).toFixed(2),
      rssMb: Math.round(sum((p) => p.rssMb)),
      pssMb: Math.round(sum((p) => p.pssMb)),
      processes: processes.map((p) => ({
        name: p.name,
        cpuSeconds: +p.cpuSeconds.toFixed(2),
        rssMb: Math.round(p.rssMb),
        pssMb: Math.round(p.pssMb),
      })),
    };
  } finally {
    try {
      process.kill(-npm.pid!, 'SIGTERM');
    } catch {
      // already gone
    }
    await new Promise((ok) => (npm.exitCode !== null ? ok(null) : npm.once('exit', ok)));
    await sleep(1000);
    try {
      process.kill(-npm.pid!, 'SIGKILL');
    } catch {
      // all stopped
    }
    rmSync(dataDir, { recursive: true, force: true });
  }
}

async function main() {
  console.log(
    `footprint of \`npm start\`: ${ROUNDS} rounds per layout, idle window ${IDLE_SECONDS} s after ${SETTLE_SECONDS} s settling\n`,
  );
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
  const layouts: Record<string, unknown> = {};
  const summaries: Record<
    string,
    { startupMs: number; idleCpuPercent: number; afterStartCpuPercent: number; rssMb: number; pssMb: number }
  > = {};
  // Layouts alternate round by round, so a busier moment of the machine does not favour one of them.
  const rounds: Record<Layout, Array<Awaited<ReturnType<typeof round>>>> = { combined: [], 'per-service': [] };
  for (let i = 0; i < ROUNDS; i++)
    for (const layout of LAYOUTS) {
      const r = await round(layout);
      console.log(
        `${layout} round ${i + 1}: start-up ${r.startupMs} ms, idle CPU ${r.idleCpuPercent} % of a core ` +
          `(${r.idleCpuSeconds} CPU-s; ${r.afterStartCpuPercent} % in the window right after start-up), ` +
          `RSS ${r.rssMb} MB, PSS ${r.pssMb} MB`,
      );
      for (const p of r.processes)
        console.log(`    ${p.name.padEnd(20)} ${p.cpuSeconds.toFixed(2)} CPU-s  RSS ${p.rssMb} MB  PSS ${p.pssMb} MB`);
      rounds[layout].push(r);
    }
  for (const layout of LAYOUTS) {
    const rs = rounds[layout];
    summaries[layout] = {
      startupMs: median(rs.map((r) => r.startupMs)),
      idleCpuPercent: median(rs.map((r) => r.idleCpuPercent)),
      afterStartCpuPercent: median(rs.map((r) => r.afterStartCpuPercent)),
      rssMb: median(rs.map((r) => r.rssMb)),
      pssMb: median(rs.map((r) => r.pssMb)),
    };
    layouts[layout] = { ...summaries[layout], rounds: rs };
  }
  const result = { date: new Date().toISOString(), node: process.version, idleSeconds: IDLE_SECONDS, ...summaries.combined, layouts };
  console.log('\nthis run (medians):');
  console.table(summaries);
  if (existsSync(RESULTS)) {
    const previous = JSON.parse(readFileSync(RESULTS, 'utf8')) as {
      date: string;
      startupMs: number;
      idleCpuPercent: number;
      rssMb: number;
    };
    console.log('previous run (default layout):', {
      date: previous.date,
      startupMs: previous.startupMs,
      idleCpuPercent: previous.idleCpuPercent,
      rssMb: previous.rssMb,
    });
  }
  writeFileSync(RESULTS, JSON.stringify(result, null, 2) + '\n');
}

runBench(main);
