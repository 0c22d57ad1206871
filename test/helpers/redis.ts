import { spawn, type ChildProcess } from 'node:child_process';
import { reservablePort } from '@svc/kit';

/** A port a child process will bind in a moment (below the ephemeral range: nothing else takes it meanwhile). */
export const freePort = () => reservablePort('127.0.0.1');

/** A real redis-server on a free loopback port, no persistence; stopped by its PID. */
export async function startRedis(port?: number): Promise<{ url: string; port: number; stop(): Promise<void> }> {
  port ??= await freePort();
  const proc: ChildProcess = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  await new Promise<void>((ok, fail) => {
    const timer = setTimeout(
      () => fail(new Error('redis-server did not start (is it installed? apt-get install -y redis-server)')),
      10_000,
    );
    proc.once('error', (err) => {
      clearTimeout(timer);
      fail(err);
    });
    proc.stdout!.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes('Ready to accept connections')) {
        clearTimeout(timer);
        ok();
      }
    });
  });
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    stop: () =>
      new Promise((ok) => {
        proc.once('exit', () => ok());
        proc.kill('SIGTERM');
      }),
  };
}
