/**
 * `npm start`: the whole system on one machine, with the embedded SQLite store and bus under DATA_DIR unless
 * MONGODB_URI / KAFKA_BROKERS say otherwise. Every service is its own real gRPC server on its own loopback port (as
 * it would be in a pod); how they are grouped into processes is the layout (SVC_LAYOUT):
 * - `combined` (the default without tracing): the services share one process and the gateway has its own
 *   (decision 41: a laptop pays for two Node runtimes instead of eight);
 * - `per-service`: one process per service, as deploy/ runs them (the default of `npm run start:cluster`, and when
 *   OTEL_* exports traces).
 * The services and the gateways start at once (addresses are chosen before anything starts); every part is
 * supervised: a part that exits is restarted (scripts/supervisor.ts). Children stop when this process stops or dies.
 *
 * `npm run start:cluster` (REPLICAS=2, GATEWAYS=2): what a Kubernetes deployment runs, here: several replicas of each
 * service (REPLICATED_SERVICES, default all) on the same store and bus files, reached round-robin by the gateways,
 * and several gateways sharing one Redis (REDIS_URL, or a redis-server started here). Gateway N listens on PORT+N-1
 * (the first on PORT, as with one), so each has an address known before start that it keeps across restarts; with
 * PORT=0 the kernel picks each one's. The ready line lists them all (`gateways`).
 *
 * Run compiled (`dist/start.js`, what `npm start` does after scripts/build.mjs) it starts the compiled entries; run
 * from source through tsx it starts the sources the same way.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { createLogger } from '@svc/kit/logger';
import { EXIT_PORT_IN_USE, reservablePort } from '@svc/kit/ports';
import { tracesExported } from '@svc/kit/telemetry-config';
import { SupervisedChild } from './supervisor';

const compiled = __filename.endsWith('.js');
const root = resolve(__dirname, '..');

/** The services: every `services/<name>/src/main.ts` (scripts/build.mjs finds them the same way). */
const SERVICES = readdirSync(resolve(root, 'services')).filter((name) => existsSync(resolve(root, 'services', name, 'src/main.ts')));
const logger = createLogger('launcher');

/**
 * V8's memory reducer compacts an idle heap once start-up has calmed, in up to three full collections (about 70 ms of
 * CPU per process some seconds after start); one is enough for a process that then idles. Passed only where this
 * Node's V8 has the flag (an unknown flag would stop the child). Compiled, the build recorded the answer
 * (dist/node-flags.json); from source it is asked here, while ports are chosen.
 */
const IDLE_GC_FLAG = '--memory-reducer-single-gc';
const idleGcFlags: Promise<string[]> = compiled
  ? Promise.resolve(JSON.parse(readFileSync(resolve(__dirname, 'node-flags.json'), 'utf8')) as string[])
  : new Promise((done) =>
      execFile(process.execPath, ['--v8-options'], { maxBuffer: 16 * 1024 * 1024 }, (err, out) =>
        done(!err && out.includes(IDLE_GC_FLAG) ? [IDLE_GC_FLAG] : []),
      ),
    );
let nodeFlags = ['--enable-source-maps'];

/** Entry file and Node flags of a part, compiled or from source. */
function entryOf(part: { kind: 'gateway' } | { kind: 'service'; name: string } | { kind: 'host' }): { entry: string; execArgv: string[] } {
  const source = { gateway: 'gateway/src/main.ts', host: 'scripts/services-host.ts' } as Record<string, string>;
  if (compiled) {
    const file = part.kind === 'service' ? `services/${part.name}.js` : part.kind === 'host' ? 'services.js' : 'gateway.js';
    return { entry: resolve(__dirname, file), execArgv: nodeFlags };
  }
  const file = part.kind === 'service' ? `services/${part.name}/src/main.ts` : source[part.kind];
  return { entry: resolve(root, file), execArgv: ['--import', 'tsx', ...nodeFlags] };
}

const children: SupervisedChild[] = [];
let stopping = false;

/** Starts one part under supervision; a failure before its first ready stops the system (a setting is wrong). */
async function launch(
  name: string,
  entry: { entry: string; execArgv: string[] },
  env: NodeJS.ProcessEnv,
  args: string[] = [],
  peers?: Promise<unknown>,
): Promise<number> {
  const child = new SupervisedChild(
    {
      name,
      ...entry,
      args,
      peers,
      cwd: root,
      // Each process names itself in traces unless the operator already did.
      env: { ...env, OTEL_SERVICE_NAME: process.env.OTEL_SERVICE_NAME ?? `svc-${name}` },
    },
    logger,
  );
  children.push(child);
  return child.start();
}

let redis: ChildProcess | null = null;

async function shutdown(code: number): Promise<void> {
  if (stopping) return;
  stopping = true;
  // Gateways first (stop taking requests), then the services.
  const gateways = children.filter((c) => c.spec.name.startsWith('gateway'));
  await Promise.all(gateways.map((c) => c.stop()));
  await Promise.all(children.filter((c) => !gateways.includes(c)).map((c) => c.stop()));
  redis?.kill('SIGTERM');
  process.exit(code);
}

/** A Redis for the gateways to share (start:cluster without REDIS_URL): Debian's redis-server, in memory only. */
async function startRedis(host: string): Promise<string> {
  const port = await reservablePort(host);
  redis = spawn('redis-server', ['--port', String(port), '--bind', host, '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  await new Promise<void>((ok, fail) => {
    redis!.once('error', () => fail(new Error('several gateways need a shared Redis: set REDIS_URL, or apt-get install redis-server')));
    setTimeout(ok, 300);
  });
  return `redis://${host}:${port}`;
}

function count(name: string, fallback: number): number {
  const n = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(n) || n < 1 || n > 16) throw new Error(`${name} must be an integer from 1 to 16`);
  return n;
}

/**
 * SVC_LAYOUT, by default `combined`; `per-service` when traces are exported (OTEL_* set), so that every service
 * names itself (service.name) in the trace backend, which one shared process could not.
 */
function layout(): 'combined' | 'per-service' {
  const value = process.env.SVC_LAYOUT ?? (tracesExported(process.env) ? 'per-service' : 'combined');
  if (value !== 'combined' && value !== 'per-service') throw new Error('SVC_LAYOUT must be combined or per-service');
  return value;
}

/** Replicas of each service and the address every one of them listens on. */
type Ports = Record<string, number[]>;

/**
 * The port of each gateway: the first on PORT (the gateway's own default, 8080, when unset), gateway N on PORT+N-1;
 * PORT=0 gives each a port of the kernel's choosing.
 */
function gatewayPorts(gateways: number): number[] {
  const first = Number(process.env.PORT ?? 8080);
  if (gateways > 1 && (!Number.isInteger(first) || first < 0 || first + gateways - 1 > 65535))
    throw new Error(`PORT must be an integer from 0 to ${65536 - gateways} with GATEWAYS=${gateways}`);
  return Array.from({ length: gateways }, (_, i) => (first === 0 ? 0 : first + i));
}

/**
 * A port for every replica of every service, and the addresses clients dial (SERVICE_ADDR unless the operator set
 * it). A `<NAME>_PORT` setting is kept for the first replica; every other port is picked, avoiding the ports the
 * settings already promise (the gateways', METRICS_PORT, the other *_PORT) and each other.
 */
async function choosePorts(
  env: NodeJS.ProcessEnv,
  host: string,
  replicas: number,
  replicated: string[],
  gatewayAt: number[],
): Promise<{ ports: Ports; addrs: NodeJS.ProcessEnv }> {
  const taken = new Set([
    ...Object.entries(process.env)
      .filter(([key, value]) => key.endsWith('PORT') && /^\d+$/.test(value ?? ''))
      .map(([, value]) => Number(value)),
    ...gatewayAt,
  ]);
  const ports: Ports = {};
  const addrs: NodeJS.ProcessEnv = {};
  for (const name of SERVICES) {
    const key = `${name.toUpperCase()}_PORT`;
    const n = replicated.includes(name) ? replicas : 1;
    ports[name] = [];
    for (let i = 0; i < n; i++) ports[name].push(i === 0 && env[key] ? Number(env[key]) : await reservablePort(host, taken));
    addrs[key] = String(ports[name][0]);
    // One replica: host:port. Several: grpc-js's address list, balanced round-robin by every client.
    addrs[`${name.toUpperCase()}_ADDR`] =
      env[`${name.toUpperCase()}_ADDR`] ??
      (n === 1 ? `${host}:${ports[name][0]}` : `ipv4:${ports[name].map((p) => `${host}:${p}`).join(',')}`);
  }
  return { ports, addrs };
}

/**
 * Starts every replica of every service at once, in the layout's processes, and `alongside` (the gateways) with the
 * addresses chosen; resolves when all are ready, with what `alongside` resolved. A retry on new ports starts both
 * again.
 */
async function startServices<T>(
  env: NodeJS.ProcessEnv,
  mode: 'combined' | 'per-service',
  host: string,
  replicas: number,
  replicated: string[],
  gatewayAt: number[],
  alongside: (withAddrs: NodeJS.ProcessEnv, servicesUp: Promise<unknown>) => Promise<T>,
): Promise<T> {
  // A port picked here can be taken by another program before the service binds it (another launcher on the same
  // machine picking at the same moment): the service then exits with EXIT_PORT_IN_USE and this tries new ports.
  for (let attempt = 1; ; attempt++) {
    const { ports, addrs } = await choosePorts(env, host, replicas, replicated, gatewayAt);
    const withAddrs = { ...env, ...addrs };
    const parts: Array<Promise<number>> = [];
    const replicaEnv = (i: number, names: readonly string[]) => ({
      ...Object.fromEntries(names.map((name) => [`${name.toUpperCase()}_PORT`, String(ports[name][i])])),
      // A worker name must be unique among live workers (a restarted one takes back every run claimed under it).
      ...(env.AGENTS_WORKER_ID && names.includes('agents') && ports.agents.length > 1
        ? { AGENTS_WORKER_ID: `${env.AGENTS_WORKER_ID}-${i + 1}` }
        : {}),
      // Where the other chat replicas reach this one: a reply's stream read on one of them is relayed from here.
      ...(names.includes('chat') && ports.chat.length > 1 ? { CHAT_PEER_ADDR: `${host}:${ports.chat[i]}` } : {}),
    });
    for (let i = 0; i < replicas; i++) {
      // Replica i of every service that has one.
      const names = SERVICES.filter((name) => ports[name].length > i);
      const suffix = (base: string, n: number) => (n > 1 ? `${base}-${i + 1}` : base);
      if (mode === 'combined')
        parts.push(
          launch(
            suffix('services', replicas),
            entryOf({ kind: 'host' }),
            { ...withAddrs, ...replicaEnv(i, names), INSTANCE_ID: `services-${i + 1}` },
            [...names],
          ),
        );
      else
        for (const name of names)
          parts.push(
            launch(suffix(name, ports[name].length), entryOf({ kind: 'service', name }), {
              ...withAddrs,
              ...replicaEnv(i, [name]),
              INSTANCE_ID: `${name}-${i + 1}`,
            }),
          );
    }
    // The gateways load their code and build while the services start (most of either's start-up is loading code),
    // and make their first calls once told that the services listen (kit peers.ts).
    const beside = alongside(withAddrs, Promise.all(parts));
    const outcomes = await Promise.allSettled(parts);
    const failures = outcomes
      .filter((o): o is PromiseRejectedResult => o.status === 'rejected')
      .map((o) => o.reason as Error & { exitCode?: number });
    if (failures.length === 0) return beside;
    beside.catch(() => undefined); // held for the services, it is stopped with them below
    if (stopping) throw failures[0];
    // Stop what did start before trying again (or giving up).
    const started = children.splice(0);
    await Promise.all(started.map((c) => c.stop()));
    // Only ports picked here are worth picking again; a port the operator set stays taken.
    const picked = !SERVICES.some((name) => env[`${name.toUpperCase()}_PORT`]);
    if (attempt >= 3 || !picked || !failures.every((f) => f.exitCode === EXIT_PORT_IN_USE)) throw failures[0];
    logger.warn({ attempt }, 'a service port was taken before the service could bind it; starting again on new ports');
  }
}

async function main(): Promise<void> {
  const started = Date.now();
  const host = process.env.SERVICE_HOST || '127.0.0.1';
  const dataDir = resolve(process.env.DATA_DIR || './.data');
  mkdirSync(dataDir, { recursive: true });
  const mode = layout();
  const replicas = count('REPLICAS', 1);
  const gateways = count('GATEWAYS', 1);
  const gatewayAt = gatewayPorts(gateways);
  const replicated = (process.env.REPLICATED_SERVICES ?? SERVICES.join(',')).split(',').map((s) => s.trim());
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir };
  if (gateways > 1 && !env.REDIS_URL) env.REDIS_URL = await startRedis(host);
  nodeFlags = [...nodeFlags, ...(await idleGcFlags)];
  const startGateways = (withAddrs: NodeJS.ProcessEnv, servicesUp: Promise<unknown>) =>
    Promise.all(
      Array.from({ length: gateways }, async (_, i) => {
        const gwEnv = {
          ...withAddrs,
          INSTANCE_ID: `gateway-${i + 1}`,
          SVC_WAIT_FOR_PEERS: '1',
          ...(i > 0 ? { PORT: String(gatewayAt[i]) } : {}),
        };
        const port = await launch(gateways > 1 ? `gateway-${i + 1}` : 'gateway', entryOf({ kind: 'gateway' }), gwEnv, [], servicesUp);
        return `http://${process.env.HOST || '127.0.0.1'}:${port}`;
      }),
    );
  const urls = await startServices(env, mode, host, replicas, replicated, gatewayAt, startGateways);
  logger.info(
    { url: urls[0], gateways: urls, dataDir, layout: mode, services: SERVICES, replicas, startupMs: Date.now() - started },
    `system ready at ${urls[0]}${urls.length > 1 ? ` (gateways: ${urls.join(', ')})` : ''}`,
  );
}

process.on('SIGTERM', () => void shutdown(0));
process.on('SIGINT', () => void shutdown(0));
main().catch((err: Error) => {
  logger.error({ err: err.message }, 'start-up failed');
  void shutdown(1);
});
