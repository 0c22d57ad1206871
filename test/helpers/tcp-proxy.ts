/** A local TCP proxy to a server that a test can cut: every open connection dropped, new ones held until let go. */
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';

export interface TcpProxy {
  url: string;
  /** Drops every open connection; connections made after are held (not passed on) until `release`. */
  cut(): void;
  /** Passes the held connections, and those to come, on to the server. */
  release(): void;
  /** How many connections have been held since the last cut. */
  held(): number;
  close(): Promise<void>;
}

export async function startTcpProxy(target: string): Promise<TcpProxy> {
  const to = new URL(target);
  const open = new Set<Socket>();
  let holding: Socket[] | null = null;
  const pass = (client: Socket) => {
    const upstream = connect(Number(to.port), to.hostname);
    for (const s of [client, upstream]) {
      open.add(s);
      s.once('close', () => open.delete(s));
      s.on('error', () => undefined);
    }
    client.once('close', () => upstream.destroy());
    upstream.once('close', () => client.destroy());
    client.pipe(upstream).pipe(client);
  };
  const server = createServer((client) => {
    if (holding) {
      client.pause();
      client.on('error', () => undefined);
      holding.push(client);
    } else pass(client);
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  return {
    url: `${to.protocol}//127.0.0.1:${(server.address() as AddressInfo).port}`,
    cut() {
      holding ??= [];
      for (const s of open) s.destroy();
    },
    release() {
      const waiting = holding ?? [];
      holding = null;
      for (const client of waiting) if (!client.destroyed) pass(client);
    },
    held: () => holding?.length ?? 0,
    close: () =>
      new Promise<void>((ok) => {
        for (const s of [...open, ...(holding ?? [])]) s.destroy();
        server.close(() => ok());
      }),
  };
}
