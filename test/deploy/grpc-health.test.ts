/**
 * deploy/grpc-health.mjs, the compose health check of every gRPC service, run as compose runs it (a child process)
 * against a real gRPC server with the health service the kit registers (grpc-health-check's HealthImplementation).
 */
import { execFile } from 'node:child_process';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { HealthImplementation } from 'grpc-health-check';

const script = path.resolve(__dirname, '../../deploy/grpc-health.mjs');

/** Exit code of the script for these arguments. */
function check(...args: string[]): Promise<number> {
  return new Promise((resolve) => {
    execFile(process.execPath, [script, ...args], { timeout: 10_000 }, (err) => resolve(err ? Number(err.code ?? 1) : 0));
  });
}

describe('deploy/grpc-health.mjs', () => {
  let server: grpc.Server;
  let health: HealthImplementation;
  let port: number;

  beforeAll(async () => {
    server = new grpc.Server();
    health = new HealthImplementation({ '': 'SERVING', 'chat.v1.ChatService': 'SERVING' });
    health.addToServer(server);
    port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
  });
  afterAll(() => server.forceShutdown());

  it('passes while the server is SERVING and fails once it reports NOT_SERVING (store down, stopping)', async () => {
    health.setStatus('', 'SERVING');
    expect(await check(String(port))).toBe(0);
    health.setStatus('', 'NOT_SERVING');
    expect(await check(String(port))).toBe(1);
    health.setStatus('', 'SERVING');
  });

  it('asks for a named service when given one, and fails for a name the server does not know', async () => {
    expect(await check(String(port), 'chat.v1.ChatService')).toBe(0);
    expect(await check(String(port), 'no.such.Service')).toBe(1);
  });

  it('fails when nothing listens, and on a missing port argument', async () => {
    const closed = new grpc.Server();
    const unused = await new Promise<number>((resolve, reject) =>
      closed.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    closed.forceShutdown();
    expect(await check(String(unused))).toBe(1);
    expect(await check()).toBe(2);
  });
});
