import { createServer, type Server, type Socket } from 'node:net';
import { createRedisClient } from './redis';

let server: Server;
const sockets: Socket[] = [];
let port = 0;
beforeAll(async () => {
  server = createServer((s) => void sockets.push(s));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as { port: number }).port;
});
afterAll(async () => {
  for (const s of sockets) s.destroy();
  await new Promise((resolve) => server.close(resolve));
});

it("survives a connection that fails twice (ioredis listens for a stream's error once)", async () => {
  const client = createRedisClient({ redisUrl: `redis://127.0.0.1:${port}` }, { retryStrategy: () => null });
  const reported: string[] = [];
  client.on('error', (err: Error) => reported.push(err.message));
  await new Promise((resolve) => client.once('connect', resolve));
  const stream = (client as unknown as { stream: NodeJS.EventEmitter }).stream;
  // As a TLS handshake refused by certificate does: the verification error, then the server's alert.
  expect(() => {
    stream.emit('error', new Error('certificate not trusted'));
    stream.emit('error', new Error('tlsv1 alert decode error'));
  }).not.toThrow();
  expect(reported).toEqual(['certificate not trusted']);
  client.disconnect();
});
