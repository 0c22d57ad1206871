import { spawn, type ChildProcess } from 'node:child_process';
import { reservablePort } from '@svc/kit';

/** A port a child process will bind in a moment (below the ephemeral range: nothing else takes it meanwhile). */
export const freePort = () => reservablePort('127.0.0.1');

export interface StartRedisOptions {
  /** TLS only (`--tls-port`, the plain port off), with this certificate and key; clients are not asked for one. */
  tls?: { certFile: string; keyFile: string; caFile: string };
  /**
   * ACL users (`--user` lines: `name on >password` then `rules`, e.g. `~svc:* &svc:* +eval`); the default user is
   * then off, so a client without credentials is refused.
   */
  users?: Array<{ name: string; password: string; rules: string }>;
}

function redisArguments(port: number, options: StartRedisOptions): string[] {
  const listen = options.tls
    ? ['--port', '0', '--tls-port', String(port), '--tls-cert-file', options.tls.certFile, '--tls-key-file', options.tls.keyFile]
    : ['--port', String(port)];
  if (options.tls) listen.push('--tls-ca-cert-file', options.tls.caFile, '--tls-auth-clients', 'no');
  const users = (options.users ?? []).flatMap((u) => ['--user', u.name, 'on', `>${u.password}`, ...u.rules.split(' ')]);
  if (options.users?.length) users.push('--user', 'default', 'off');
  return [...listen, '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...users];
}

/**
 * A real redis-server on a free loopback port, no persistence; stopped by its PID. `url` has no credentials
 * (`redis://` or, with TLS, `rediss://`); `urlFor` adds a user's.
 */
export async function startRedis(
  port?: number,
  options: StartRedisOptions = {},
): Promise<{ url: string; port: number; urlFor(user: string, password: string): string; stop(): Promise<void> }> {
  port ??= await freePort();
  const proc: ChildProcess = spawn('redis-server', redisArguments(port, options), {
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
  const scheme = options.tls ? 'rediss' : 'redis';
  return {
    url: `${scheme}://127.0.0.1:${port}`,
    port,
    urlFor: (user, password) => `${scheme}://${encodeURIComponent(user)}:${encodeURIComponent(password)}@127.0.0.1:${port}`,
    stop: () =>
      new Promise((ok) => {
        proc.once('exit', () => ok());
        proc.kill('SIGTERM');
      }),
  };
}
