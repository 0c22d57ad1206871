import * as grpc from '@grpc/grpc-js';
import { service as libraryService } from 'grpc-health-check';
import { createLogger } from '../logger';
import { decodeCheckRequest, decodeCheckResponse, encodeCheckRequest, encodeCheckResponse, encodeListResponse } from './health';
import { GrpcServer } from './server';

// The hand-written codecs against grpc-health-check's (protobufjs, from the protocol's .proto), both ways, and a
// standard client built from that .proto against a kit server.
type Method = {
  requestSerialize(v: unknown): Buffer;
  requestDeserialize(b: Buffer): any;
  responseSerialize(v: unknown): Buffer;
  responseDeserialize(b: Buffer): any;
};
const raw = libraryService as unknown as Record<'Check' | 'Watch' | 'List', Method & { path: string }>;
const lib = { check: raw.Check, watch: raw.Watch, list: raw.List };

it('encodes and decodes the three messages as the protocol .proto does', () => {
  for (const service of ['', 'chat.v1.ChatService', 'é'.repeat(100), 'x'.repeat(300)]) {
    expect(lib.check.requestDeserialize(encodeCheckRequest({ service }))).toEqual({ service });
    expect(decodeCheckRequest(lib.check.requestSerialize({ service }))).toEqual({ service });
  }
  for (const status of ['UNKNOWN', 'SERVING', 'NOT_SERVING', 'SERVICE_UNKNOWN'] as const) {
    expect(lib.check.responseDeserialize(encodeCheckResponse({ status }))).toEqual({ status });
    expect(decodeCheckResponse(lib.check.responseSerialize({ status }))).toEqual({ status });
  }
  const statuses = { '': { status: 'SERVING' }, 'a.v1.A': { status: 'NOT_SERVING' }, 'b.v1.B': { status: 'UNKNOWN' } } as const;
  expect(lib.list.responseDeserialize(encodeListResponse({ statuses }))).toEqual({ statuses });
  // Unknown fields are skipped; a truncated message is refused.
  expect(decodeCheckRequest(Buffer.concat([Buffer.from([0x10, 0x96, 0x01]), encodeCheckRequest({ service: 's' })]))).toEqual({
    service: 's',
  });
  expect(() => decodeCheckRequest(Buffer.from([0x0a, 0x05, 0x61]))).toThrow();
});

describe('a kit server, asked by a client built from the protocol .proto', () => {
  let server: GrpcServer;
  let client: grpc.Client;
  const call = (name: 'check' | 'list', request: unknown) =>
    new Promise<any>((resolve, reject) =>
      client.makeUnaryRequest(
        lib[name].path,
        lib[name].requestSerialize,
        lib[name].responseDeserialize,
        request,
        new grpc.Metadata(),
        {},
        (err, res) => (err ? reject(err) : resolve(res)),
      ),
    );
  beforeAll(async () => {
    server = new GrpcServer({
      host: '127.0.0.1',
      port: 0,
      logger: createLogger('test', 'silent'),
      verifier: null as never,
      healthNames: ['x.v1.X'],
    });
    const port = await server.start();
    client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  });
  afterAll(async () => {
    client.close();
    await server.stop(100);
  });

  it('answers Check and List, NOT_FOUND for a name it does not know, and Watch follows a status as it changes', async () => {
    await expect(call('check', { service: 'x.v1.X' })).resolves.toEqual({ status: 'SERVING' });
    await expect(call('check', { service: 'nope' })).rejects.toMatchObject({ code: grpc.status.NOT_FOUND });
    await expect(call('list', {})).resolves.toEqual({ statuses: { '': { status: 'SERVING' }, 'x.v1.X': { status: 'SERVING' } } });

    const seen: string[] = [];
    const watch = client.makeServerStreamRequest(
      lib.watch.path,
      lib.watch.requestSerialize,
      lib.watch.responseDeserialize,
      { service: 'x.v1.X' },
      new grpc.Metadata(),
      {},
    );
    watch.on('data', (m: { status: string }) => seen.push(m.status));
    watch.on('error', () => undefined);
    const until = async (n: number) => {
      for (let i = 0; i < 100 && seen.length < n; i++) await new Promise((r) => setTimeout(r, 10));
    };
    await until(1);
    server.health.setStatus('x.v1.X', 'NOT_SERVING');
    await until(2);
    expect(seen).toEqual(['SERVING', 'NOT_SERVING']);
    watch.cancel();
  });
});
