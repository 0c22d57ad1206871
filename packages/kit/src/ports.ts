import { createServer } from 'node:net';

/**
 * A port to be bound a few seconds from now (by a child process, a service, redis-server). Taken below the kernel's
 * ephemeral range (32768+ on Linux), where `listen(0)` and client sockets never land: a port handed to some other
 * program in between cannot take it from us. Checked free by binding it. `taken` holds ports already promised to
 * someone (the gateway's PORT, earlier picks): a probe alone cannot see them, since nothing listens there yet. The
 * pick is added to it.
 */
export async function reservablePort(host = '127.0.0.1', taken: Set<number> = new Set()): Promise<number> {
  return (await reservablePorts(1, host, taken))[0];
}

/**
 * `count` consecutive ports (p, p+1, ...), each free as reservablePort's pick is: for a launcher told PORT whose
 * gateway N listens on PORT+N-1 (GATEWAYS, scripts/start.ts). The picks are added to `taken`.
 */
export async function reservablePorts(count: number, host = '127.0.0.1', taken: Set<number> = new Set()): Promise<number[]> {
  // From a random place in the range onwards: launchers starting together rarely probe the same port first, and a
  // free run is found whenever one exists.
  const start = Math.floor(Math.random() * RANGE.size);
  for (let i = 0; i < RANGE.size; i++) {
    const first = RANGE.first + ((start + i) % RANGE.size);
    const run = Array.from({ length: count }, (_, k) => first + k);
    if (first + count > RANGE.first + RANGE.size || run.some((port) => taken.has(port))) continue;
    if (!(await everyBindable(run, host))) continue;
    for (const port of run) taken.add(port);
    return run;
  }
  throw new Error(`no free port found between ${RANGE.first} and ${RANGE.first + RANGE.size - 1}`);
}

const RANGE = { first: 20_000, size: 12_000 };

async function everyBindable(ports: number[], host: string): Promise<boolean> {
  for (const port of ports) if (!(await bindable(port, host))) return false;
  return true;
}

function bindable(port: number, host: string): Promise<boolean> {
  return new Promise((ok) => {
    const srv = createServer();
    srv.once('error', () => ok(false));
    srv.listen(port, host, () => srv.close(() => ok(true)));
  });
}

/**
 * Exit code of a process that could not listen because its port was taken (Linux's errno for EADDRINUSE): a launcher
 * that picked the port can pick another and try again, which it cannot do for any other failure.
 */
export const EXIT_PORT_IN_USE = 98;

/** Whether a listen failed because the address is in use (Node's net error, or grpc-js's bind error around it). */
export function isPortInUse(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown } | null;
  return e?.code === 'EADDRINUSE' || (typeof e?.message === 'string' && e.message.includes('EADDRINUSE'));
}
