import { createServer } from 'node:net';

/**
 * A port to be bound a few seconds from now (by a child process, a service, redis-server). Taken below the kernel's
 * ephemeral range (32768+ on Linux), where `listen(0)` and client sockets never land: a port handed to some other
 * program in between cannot take it from us. Checked free by binding it.
 */
export async function reservablePort(host = '127.0.0.1'): Promise<number> {
  for (let attempt = 0; ; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    const free = await new Promise<boolean>((ok) => {
      const srv = createServer();
      srv.once('error', () => ok(false));
      srv.listen(port, host, () => srv.close(() => ok(true)));
    });
    if (free) return port;
    if (attempt > 50) throw new Error('no free port found between 20000 and 32000');
  }
}
