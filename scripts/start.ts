/**
 * `npm start`: the whole system on one machine. Every service runs as its own process and real gRPC server on
 * loopback (as it would in a pod), with the embedded SQLite store and bus under DATA_DIR unless MONGODB_URI /
 * KAFKA_BROKERS say otherwise; then the gateway. A part that exits is restarted (scripts/supervisor.ts); children stop
 * when this process stops or dies.
 */
import { mkdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { resolve } from 'node:path';
import { createLogger } from '@svc/kit';
import { SupervisedChild } from './supervisor';

/** Services in start order; each entry is `services/<name>/src/main.ts`. */
export const SERVICES = ['identity', 'projects', 'agents', 'chat', 'regions', 'billing', 'webhooks'] as const;

const root = resolve(__dirname, '..');
const logger = createLogger('launcher');

function freePort(host: string): Promise<number> {
  return new Promise((ok, fail) => {
    const srv = createServer();
    srv.once('error', fail);
    srv.listen(0, host, () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => ok(port));
    });
  });
}

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

async function shutdown(code: number): Promise<void> {
  if (stopping) return;
  stopping = true;
  // Gateway first (stop taking requests), then services in reverse start order.
  for (const child of [...children].reverse()) await child.stop();
  process.exit(code);
}

async function main(): Promise<void> {
  const host = process.env.SERVICE_HOST || '127.0.0.1';
  const dataDir = resolve(process.env.DATA_DIR || './.data');
  mkdirSync(dataDir, { recursive: true });
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir };
  for (const name of SERVICES) {
    const key = `${name.toUpperCase()}_PORT`;
    const port = env[key] ? Number(env[key]) : await freePort(host);
    env[key] = String(port);
    env[`${name.toUpperCase()}_ADDR`] ??= `${host}:${port}`;
  }
  const started = Date.now();
  for (const name of SERVICES) await launch(name, `services/${name}/src/main.ts`, env);
  const port = await launch('gateway', 'gateway/src/main.ts', env);
  const url = `http://${process.env.HOST || '127.0.0.1'}:${port}`;
  logger.info({ url, dataDir, services: SERVICES, startupMs: Date.now() - started }, `system ready at ${url}`);
}

process.on('SIGTERM', () => void shutdown(0));
process.on('SIGINT', () => void shutdown(0));
main().catch((err: Error) => {
  logger.error({ err: err.message }, 'start-up failed');
  void shutdown(1);
});
