/**
 * `npm start`: the whole system on one machine. Every service runs as its own process and real gRPC server on
 * loopback (as it would in a pod), with the embedded SQLite store and bus under DATA_DIR unless MONGODB_URI /
 * KAFKA_BROKERS say otherwise; then the gateway. Children stop when this process stops or dies.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { resolve } from 'node:path';
import { createLogger } from '@svc/kit';

/** Services in start order; each entry is `services/<name>/src/main.ts`. */
export const SERVICES = ['identity', 'projects', 'agents', 'chat', 'regions', 'webhooks'] as const;

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

interface Child {
  name: string;
  proc: ChildProcess;
}

const children: Child[] = [];
let stopping = false;

function launch(name: string, entry: string, env: NodeJS.ProcessEnv): Promise<{ child: Child; port: number }> {
  return new Promise((ok, fail) => {
    const proc = fork(resolve(root, entry), [], {
      cwd: root,
      // Each process names itself in traces unless the operator already did.
      env: { ...env, OTEL_SERVICE_NAME: process.env.OTEL_SERVICE_NAME ?? `svc-${name}` },
      execArgv: ['--import', 'tsx', '--enable-source-maps'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const child = { name, proc };
    children.push(child);
    const timer = setTimeout(() => fail(new Error(`${name} did not become ready within 60 s`)), 60_000);
    proc.on('message', (m: { type?: string; port?: number }) => {
      if (m?.type === 'ready') {
        clearTimeout(timer);
        ok({ child, port: m.port! });
      }
    });
    proc.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (!stopping) {
        logger.error({ service: name, code, signal }, `${name} exited; stopping the system`);
        void shutdown(1);
      }
      fail(new Error(`${name} exited with ${code ?? signal} before it was ready`));
    });
  });
}

async function shutdown(code: number): Promise<void> {
  if (stopping) return;
  stopping = true;
  // Gateway first (stop taking requests), then services in reverse start order.
  for (const { proc } of [...children].reverse()) {
    if (proc.exitCode !== null || proc.signalCode !== null) continue;
    await new Promise<void>((done) => {
      const force = setTimeout(() => proc.kill('SIGKILL'), 10_000);
      proc.once('exit', () => {
        clearTimeout(force);
        done();
      });
      proc.kill('SIGTERM');
    });
  }
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
  const { port } = await launch('gateway', 'gateway/src/main.ts', env);
  const url = `http://${process.env.HOST || '127.0.0.1'}:${port}`;
  logger.info({ url, dataDir, services: SERVICES, startupMs: Date.now() - started }, `system ready at ${url}`);
}

process.on('SIGTERM', () => void shutdown(0));
process.on('SIGINT', () => void shutdown(0));
main().catch((err: Error) => {
  logger.error({ err: err.message }, 'start-up failed');
  void shutdown(1);
});
