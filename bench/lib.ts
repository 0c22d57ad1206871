import { execFileSync, fork, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { reservablePorts } from '@svc/kit/ports';

export const ROOT = resolve(__dirname, '..');
const children: ChildProcess[] = [];

/** Starts a TypeScript entry as its own process; resolves with the port it reports over IPC. */
export function startProcess(
  entry: string,
  env: Record<string, string> = {},
  execArgv: string[] = [],
  /** `detached`: a process group of its own (stopped as a system is, by its group). */
  options: { detached?: boolean } = {},
): Promise<{ proc: ChildProcess; port: number }> {
  return new Promise((ok, fail) => {
    const proc = fork(resolve(ROOT, entry), [], {
      ...options,
      cwd: ROOT,
      env: { ...process.env, LOG_LEVEL: 'warn', ...env },
      execArgv: ['--import', 'tsx', ...execArgv],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    children.push(proc);
    proc.on('message', (m: { type?: string; port?: number }) => m?.type === 'ready' && ok({ proc, port: m.port! }));
    proc.once('exit', (code) => fail(new Error(`${entry} exited with ${code}`)));
  });
}

export function stopAll(): void {
  for (const c of children) c.kill('SIGTERM');
}
process.on('exit', stopAll);

export interface LoadResult {
  requests: number;
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  non2xx: number;
  /** Answers by HTTP status. */
  statuses: Record<string, number>;
}

/** autocannon as a separate process (so the load generator does not share the server's event loop). */
export function load(
  url: string,
  options: { connections: number; seconds: number; headers?: Record<string, string>; method?: string; body?: string },
): Promise<LoadResult> {
  const args = ['-j', '-c', String(options.connections), '-d', String(options.seconds)];
  for (const [k, v] of Object.entries(options.headers ?? {})) args.push('-H', `${k}=${v}`);
  if (options.method) args.push('-m', options.method);
  if (options.body !== undefined) args.push('-b', options.body);
  args.push(url);
  return new Promise((ok, fail) => {
    const proc = spawn(resolve(ROOT, 'node_modules/.bin/autocannon'), args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    proc.stdout.on('data', (c: Buffer) => (out += c.toString()));
    proc.once('exit', (code) => {
      if (code !== 0) return fail(new Error(`autocannon exited ${code}`));
      const r = JSON.parse(out) as {
        requests: { average: number; total: number };
        latency: { p50: number; p99: number };
        errors: number;
        non2xx: number;
        statusCodeStats?: Record<string, { count: number }>;
      };
      ok({
        requests: r.requests.total,
        rps: r.requests.average,
        p50: r.latency.p50,
        p99: r.latency.p99,
        errors: r.errors,
        non2xx: r.non2xx,
        statuses: Object.fromEntries(Object.entries(r.statusCodeStats ?? {}).map(([status, { count }]) => [status, count])),
      });
    });
  });
}

/** Calls the system's API at `base` (`http://host:port/api/v1`); answers `data`, throws on a status >= 300. */
export async function call(base: string, method: string, path: string, token: string | null, body?: unknown): Promise<any> {
  const res = await fetch(base + path, {
    method,
    headers: {
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = (await res.json()) as { data: any };
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
  return json.data;
}

/** A new tenant on the system at `base` (`http://host:port/api/v1`): its owner's access token and an SDK API key. */
export async function benchTenant(base: string): Promise<{ accessToken: string; apiKey: string }> {
  const reg = await call(base, 'POST', '/auth/register', null, {
    email: `bench${Date.now()}${Math.random()}@example.com`,
    password: 'bench-password',
    name: 'Bench',
    tenantName: 'Bench',
  });
  const key = await call(base, 'POST', '/api-keys', reg.accessToken, { name: 'bench', type: 'sdk', environment: 'production' });
  return { accessToken: reg.accessToken as string, apiKey: key.key as string };
}

/** What every results file starts with: when, on which Node, and the load's shape. */
export function runHeader(load: { connections: number; seconds: number; rounds: number }) {
  return { date: new Date().toISOString(), node: process.version, ...load };
}

/** Writes a bench's results to `file`, after printing `pick` of the previous run's beside them. */
export function saveResults<R extends { date: string }>(file: string, result: R, pick: (r: R) => unknown): void {
  if (existsSync(file)) {
    const previous = JSON.parse(readFileSync(file, 'utf8')) as R;
    console.log(`previous run (${previous.date}):`, pick(previous));
  }
  writeFileSync(file, JSON.stringify(result, null, 2) + '\n');
  console.log(`written to ${file}`);
}

/** Runs a bench's main: failures set the exit code; every child process is stopped either way. */
export function runBench(main: () => Promise<void>): void {
  main()
    .catch((err: Error) => {
      console.error(err.stack ?? err.message);
      process.exitCode = 1;
    })
    .finally(() => {
      stopAll();
      setTimeout(() => process.exit(), 500).unref();
    });
}

/**
 * Settings of every benchmarked system: a bench measures throughput, not the per-tenant guards that answer 429 or
 * 409 (rate limits, the caps on projects, agents, chat sessions, open reply streams and replies generating at
 * once), which one bench tenant would otherwise hit. The fairness settings that only order work (webhook and run
 * concurrency per tenant) stay as users run them.
 */
export const UNCAPPED = {
  RATE_LIMIT_MAX: '100000000',
  PROJECTS_PER_TENANT: '1000000',
  AGENTS_PER_TENANT: '1000000',
  CHAT_SESSIONS_PER_TENANT: '10000000',
  SSE_STREAMS_PER_TENANT: '100000',
  CHAT_TENANT_CONCURRENCY: '10000',
} as const;

/**
 * The whole system as `npm start` runs it (the compiled launcher, every service and its workers), on a fresh data
 * directory, with the per-tenant guards lifted; resolves with its port once `/readyz` answers 200. `root`: another
 * checkout of the repository (an earlier commit, to measure before and after in one run); `env`: settings of its own.
 * With GATEWAYS in `env`, gateway N listens on PORT+N-1 (scripts/start.ts): `ports` has every gateway's, each ready
 * (another checkout from before that gave only the first a known port: the first's alone, 20 s after it was ready).
 */
export async function startNpmStart(
  root = ROOT,
  env: Record<string, string> = {},
): Promise<{ port: number; ports: number[]; pid: number }> {
  execFileSync(process.execPath, ['scripts/build.mjs'], { cwd: root, stdio: 'inherit' });
  const ports = await reservablePorts(Number(env.GATEWAYS ?? 1));
  const port = ports[0];
  const proc = spawn(process.execPath, ['dist/start.js'], {
    cwd: root,
    env: {
      ...process.env,
      PORT: String(port),
      DATA_DIR: mkdtempSync(join(tmpdir(), 'svc-bench-')),
      ...UNCAPPED,
      LOG_LEVEL: 'warn',
      ...env,
    },
    stdio: ['ignore', 'inherit', 'inherit'],
    detached: true,
  });
  process.on('exit', () => {
    try {
      process.kill(-proc.pid!, 'SIGTERM');
    } catch {
      // already gone
    }
  });
  let firstReadyAt = 0;
  // The launcher gives each part 60 s to start; on a loaded machine the whole can take about that long.
  for (const deadline = Date.now() + 120_000; ;) {
    const ready = await Promise.all(
      ports.map((p) =>
        fetch(`http://127.0.0.1:${p}/readyz`).then(
          (r) => r.status === 200,
          () => false,
        ),
      ),
    );
    if (ready.every(Boolean)) return { port, ports, pid: proc.pid! };
    if (ready[0]) firstReadyAt ||= Date.now();
    if (root !== ROOT && firstReadyAt && Date.now() - firstReadyAt > 20_000) {
      console.log(`${root}: only the first gateway listens where expected (PORT+N-1 came later); load goes to it alone`);
      return { port, ports: [port], pid: proc.pid! };
    }
    if (Date.now() > deadline) throw new Error('the system was not ready within 120 s');
    await new Promise((r) => setTimeout(r, 100));
  }
}

const TICKS = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;

export interface Proc {
  pid: number;
  ppid: number;
  /** user + system CPU time, in clock ticks */
  cpuTicks: number;
  command: string;
}

/** Short name of a process for a breakdown by process: the entry it runs. */
export function processLabel(command: string): string {
  const m = /(services\/[a-z]+|dist\/services\.js|gateway|dist\/start|scripts\/[a-z-.]+|bench\/fixtures\/[a-z-]+|npm start|esbuild)/.exec(
    command,
  );
  return m ? m[1] : command.slice(0, 40);
}

/** Every process on the machine, from /proc. */
export function readProcs(): Proc[] {
  const out: Proc[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // fields after the command: state ppid ... utime(14th overall = index 11 here) stime cutime cstime
      const cpuTicks = Number(f[11]) + Number(f[12]);
      const command = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').join(' ').trim();
      out.push({ pid: Number(entry), ppid: Number(f[1]), cpuTicks, command });
    } catch {
      // ended while we looked
    }
  }
  return out;
}

/** The processes `roots` and all their descendants. */
export function processTree(...roots: number[]): Proc[] {
  const all = readProcs();
  const found = new Map<number, Proc>();
  let frontier = all.filter((p) => roots.includes(p.pid));
  while (frontier.length) {
    for (const p of frontier) found.set(p.pid, p);
    frontier = all.filter((p) => !found.has(p.pid) && found.has(p.ppid));
  }
  return [...found.values()];
}

/** CPU-seconds used so far by the trees rooted at `roots` (processes still running). */
export function cpuSeconds(...roots: number[]): number {
  return processTree(...roots).reduce((sum, p) => sum + p.cpuTicks, 0) / TICKS;
}

export { TICKS };
