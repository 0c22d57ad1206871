/**
 * `npm start`: the whole system on one machine. Every service runs as its own process and real gRPC server on
 * loopback (as it would in a pod), with the embedded SQLite store and bus under DATA_DIR unless MONGODB_URI /
 * KAFKA_BROKERS say otherwise; then the gateway. A part that exits is restarted (scripts/supervisor.ts); children stop
 * when this process stops or dies.
 *
 * `npm run start:cluster` (REPLICAS=2, GATEWAYS=2): what a Kubernetes deployment runs, here: several replicas of each
 * service (REPLICATED_SERVICES, default all) on the same store and bus files, reached round-robin by the gateways,
 * and several gateways sharing one Redis (REDIS_URL, or a redis-server started here).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { createLogger, reservablePort } from '@svc/kit';
import { SupervisedChild } from './supervisor';

/** Services in start order; each entry is `services/<name>/src/main.ts`. */
export const SERVICES = ['identity', 'projects', 'agents', 'chat', 'regions', 'billing', 'webhooks'] as const;

const root = resolve(__dirname, '..');
const logger = createLogger('launcher');

const children: SupervisedChild[] = [];
let stopping = false;

/** Starts one part under supervision; a failure before its first ready stops the system (a setting is wrong). */
async function launch(name: string, entry: string, env: NodeJS.ProcessEnv): Promise<number> {
  const child = new SupervisedChild(
    {
      name,
      entry: resolve(root, entry),
      cwd: root,
      // Each process names itself in traces unless the operator already did.
      env: { ...env, OTEL_SERVICE_NAME: process.env.OTEL_SERVICE_NAME ?? `svc-${name}` },
      execArgv: ['--import', 'tsx', '--enable-source-maps'],
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
  // Gateways first (stop taking requests), then services in reverse start order.
  for (const child of [...children].reverse()) await child.stop();
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

async function main(): Promise<void> {
  const host = process.env.SERVICE_HOST || '127.0.0.1';
  const dataDir = resolve(process.env.DATA_DIR || './.data');
  mkdirSync(dataDir, { recursive: true });
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir };
  const replicas = count('REPLICAS', 1);
  const gateways = count('GATEWAYS', 1);
  const replicated = (process.env.REPLICATED_SERVICES ?? SERVICES.join(',')).split(',').map((s) => s.trim());
  const ports: Record<string, number[]> = {};
  for (const name of SERVICES) {
    const key = `${name.toUpperCase()}_PORT`;
    const n = replicated.includes(name) ? replicas : 1;
    ports[name] = [];
    for (let i = 0; i < n; i++) ports[name].push(i === 0 && env[key] ? Number(env[key]) : await reservablePort(host));
    env[key] = String(ports[name][0]);
    // One replica: host:port. Several: grpc-js's address list, balanced round-robin by every client.
    env[`${name.toUpperCase()}_ADDR`] ??=
      n === 1 ? `${host}:${ports[name][0]}` : `ipv4:${ports[name].map((p) => `${host}:${p}`).join(',')}`;
  }
  if (gateways > 1 && !env.REDIS_URL) env.REDIS_URL = await startRedis(host);
  const started = Date.now();
  for (const name of SERVICES)
    for (const [i, port] of ports[name].entries())
      await launch(ports[name].length > 1 ? `${name}-${i + 1}` : name, `services/${name}/src/main.ts`, {
        ...env,
        [`${name.toUpperCase()}_PORT`]: String(port),
        INSTANCE_ID: `${name}-${i + 1}`,
      });
  const urls: string[] = [];
  for (let i = 0; i < gateways; i++) {
    const gwEnv = { ...env, INSTANCE_ID: `gateway-${i + 1}`, ...(i > 0 ? { PORT: '0' } : {}) };
    const port = await launch(gateways > 1 ? `gateway-${i + 1}` : 'gateway', 'gateway/src/main.ts', gwEnv);
    urls.push(`http://${process.env.HOST || '127.0.0.1'}:${port}`);
  }
  logger.info(
    { url: urls[0], gateways: urls, dataDir, services: SERVICES, replicas, startupMs: Date.now() - started },
    `system ready at ${urls[0]}`,
  );
}

process.on('SIGTERM', () => void shutdown(0));
process.on('SIGINT', () => void shutdown(0));
main().catch((err: Error) => {
  logger.error({ err: err.message }, 'start-up failed');
  void shutdown(1);
});
