import { createServer, type Server } from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { isPortInUse, reservablePort, reservablePorts } from './ports';

const listen = (port: number) =>
  new Promise<Server>((ok, fail) => {
    const srv = createServer();
    srv.once('error', fail);
    srv.listen(port, '127.0.0.1', () => ok(srv));
  });

describe('reservablePort', () => {
  it('never hands out a port already promised in `taken`, and adds its pick to it', async () => {
    // Promise all but a handful of the range: every pick must come from the few left.
    const left = [20_001, 25_000, 31_999];
    const taken = new Set<number>();
    for (let p = 20_000; p < 32_000; p++) if (!left.includes(p)) taken.add(p);
    const picks = new Set<number>();
    for (let i = 0; i < 3; i++) picks.add(await reservablePort('127.0.0.1', taken));
    expect([...picks].sort()).toEqual(left.sort());
    expect(taken.size).toBe(12_000);
    await expect(reservablePort('127.0.0.1', taken)).rejects.toThrow('no free port found between 20000 and 31999');
  });

  it('skips a port something listens on', async () => {
    const taken = new Set<number>();
    for (let p = 20_000; p < 32_000; p++) taken.add(p);
    let busy = 26_000 + Math.floor(Math.random() * 1000);
    let srv: Server | null = null;
    // A port this test can hold (another process may hold the first one tried: then it is busy anyway).
    while (!(srv = await listen(busy).catch(() => null))) busy += 2;
    taken.delete(busy);
    taken.delete(busy + 1);
    try {
      expect(await reservablePort('127.0.0.1', taken)).toBe(busy + 1);
    } finally {
      srv.close();
    }
  });
});

describe('reservablePorts', () => {
  it('hands out a run of consecutive ports none of which is promised, and adds them all to `taken`', async () => {
    // Left free: a lone port (no run of 3 fits there) and one run of 3 at the range's end.
    const left = [21_000, 31_997, 31_998, 31_999];
    const taken = new Set<number>();
    for (let p = 20_000; p < 32_000; p++) if (!left.includes(p)) taken.add(p);
    expect(await reservablePorts(3, '127.0.0.1', taken)).toEqual([31_997, 31_998, 31_999]);
    expect(taken.has(31_998)).toBe(true);
    await expect(reservablePorts(2, '127.0.0.1', taken)).rejects.toThrow('no free port found');
    expect(await reservablePorts(1, '127.0.0.1', taken)).toEqual([21_000]);
  });
});

describe('isPortInUse', () => {
  it("recognises Node's listen error and grpc-js's bind error, and nothing else", async () => {
    const srv = await listen(0);
    const port = (srv.address() as { port: number }).port;
    try {
      const netErr = await listen(port).then(
        (s) => (s.close(), null),
        (err: unknown) => err,
      );
      expect(isPortInUse(netErr)).toBe(true);
      const server = new grpc.Server();
      const grpcErr = await new Promise<Error | null>((done) =>
        server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (err) => done(err)),
      );
      server.forceShutdown();
      expect(grpcErr).not.toBeNull();
      expect(isPortInUse(grpcErr)).toBe(true);
    } finally {
      srv.close();
    }
    expect(isPortInUse(new Error('EACCES: permission denied'))).toBe(false);
    expect(isPortInUse(null)).toBe(false);
  });
});
