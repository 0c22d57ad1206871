import * as grpc from '@grpc/grpc-js';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { chatV1, identityV1 } from '@svc/proto';
import { JwtVerifier } from '../jwt';
import { createLogger } from '../logger';
import { createClient, type ServiceClient } from './client';
import { GrpcServer, registration } from './server';
import type { CallContext } from './types';

// Load spreading across replicas, on real servers (kit's GrpcServer, as every service starts one) and kit's client:
// round robin over every address of one target, and a replica added later found once the connections age.
// Thousands of calls on a loaded 2-core machine: outcomes are asserted, never durations, with a generous time limit.
jest.setTimeout(180_000);

const def = identityV1.IdentityServiceService;
const fail = () => Promise.reject(new Error('not used'));

interface Replica {
  name: string;
  server: GrpcServer;
  port: number;
  served: number;
}

/** A replica answers GetJwks (public: no JWT) with its own name and counts what it served. */
async function startReplica(name: string, ages: { maxConnectionAgeMs?: number; maxConnectionAgeGraceMs?: number } = {}): Promise<Replica> {
  const server = new GrpcServer({
    host: '127.0.0.1',
    port: 0,
    logger: createLogger('spread', 'silent'),
    verifier: new JwtVerifier({ issuer: 'iss', audience: 'aud', fetchJwks: async () => ({ keys: [] }) }),
    healthNames: [],
    ...ages,
  });
  const replica: Replica = { name, server, port: 0, served: 0 };
  const impl = Object.fromEntries(Object.keys(def).map((k) => [k, fail])) as Record<string, unknown>;
  impl.getJwks = async () => {
    replica.served += 1;
    return { jwksJson: name };
  };
  server.add(registration({ definition: def, implementation: impl as never, publicMethods: ['getJwks'] }));
  // A reply stream that outlives a connection's age: it must finish on the connection it started on.
  const chat = Object.fromEntries(Object.keys(chatV1.ChatServiceService).map((k) => [k, fail])) as Record<string, unknown>;
  chat.streamReply = async (_req: unknown, _ctx: CallContext, send: (m: object) => Promise<void>) => {
    for (let i = 0; i < 12; i++) {
      await send({ id: `m:${i}`, type: 'delta', messageId: name });
      await new Promise((r) => setTimeout(r, 250));
    }
  };
  server.add(registration({ definition: chatV1.ChatServiceService, implementation: chat as never, publicMethods: ['streamReply'] }));
  replica.port = await server.start();
  return replica;
}

/** `count` calls, `concurrency` at a time; returns how many each replica answered. */
async function callMany(client: ServiceClient<typeof def>, count: number, concurrency = 50): Promise<Record<string, number>> {
  const byReplica: Record<string, number> = {};
  let left = count;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (left > 0) {
        left -= 1;
        const { jwksJson } = await client.getJwks({});
        byReplica[jwksJson] = (byReplica[jwksJson] ?? 0) + 1;
      }
    }),
  );
  return byReplica;
}

/** Calls until every named replica has answered once: round robin connects to all of them, each in its own time. */
async function warmUp(client: ServiceClient<typeof def>, names: string[]): Promise<void> {
  const seen = new Set<string>();
  for (let i = 0; i < 500 && seen.size < names.length; i++) seen.add((await client.getJwks({})).jwksJson);
  expect([...seen].sort()).toEqual([...names].sort());
}

describe('three replicas behind one ipv4: target', () => {
  let replicas: Replica[];
  let client: ServiceClient<typeof def>;

  beforeAll(async () => {
    replicas = await Promise.all(['a', 'b', 'c'].map((n) => startReplica(n)));
    client = createClient(def, `ipv4:${replicas.map((r) => `127.0.0.1:${r.port}`).join(',')}`, { deadlineMs: 10_000 });
  });
  afterAll(async () => {
    client.close();
    await Promise.all(replicas.map((r) => r.server.stop(100)));
  });

  it('spreads 900 calls within 10 % of a third each', async () => {
    await warmUp(client, ['a', 'b', 'c']);
    const counts = await callMany(client, 900);
    // Reported in the test output: the figures behind the assertion.
    console.log(`900 calls over 3 replicas: ${JSON.stringify(counts)}`);
    expect(Object.keys(counts).sort()).toEqual(['a', 'b', 'c']);
    for (const n of Object.values(counts)) {
      expect(n).toBeGreaterThanOrEqual(270);
      expect(n).toBeLessThanOrEqual(330);
    }
  });
});

/**
 * A name resolver the test controls, standing in for a headless Service's DNS: it answers the addresses it holds now
 * whenever the channel asks (at start, and again when a connection ends), never on its own, and at most every 100 ms
 * (grpc-js's dns resolver has the same kind of bound, `grpc.dns_min_time_between_resolutions_ms`).
 */
const resolved = { addresses: [] as number[], resolutions: 0 };
class ReplicasResolver implements grpc.experimental.Resolver {
  private timer: NodeJS.Timeout | null = null;
  private last = -Infinity;
  constructor(
    _target: unknown,
    private readonly listener: grpc.experimental.ResolverListener,
  ) {}
  updateResolution(): void {
    if (this.timer) return;
    this.timer = setTimeout(
      () => {
        this.timer = null;
        this.last = performance.now();
        resolved.resolutions += 1;
        const endpoints = resolved.addresses.map((port) => ({ addresses: [{ host: '127.0.0.1', port }] }));
        this.listener(grpc.experimental.statusOrFromValue(endpoints), {}, null, '');
      },
      Math.max(0, this.last + 100 - performance.now()),
    );
  }
  destroy(): void {
    if (this.timer) clearTimeout(this.timer);
  }
  static getDefaultAuthority(): string {
    return 'replicas';
  }
}

describe('a replica added while calls run', () => {
  const AGE_MS = 1000;
  let replicas: Replica[];
  let client: ServiceClient<typeof def>;
  let streams: ServiceClient<typeof chatV1.ChatServiceService>;

  beforeAll(async () => {
    grpc.experimental.registerResolver('replicas', ReplicasResolver);
    // A short connection age; a grace long enough for the 3 s reply stream below.
    replicas = await Promise.all(
      ['a', 'b', 'c'].map((n) => startReplica(n, { maxConnectionAgeMs: AGE_MS, maxConnectionAgeGraceMs: 10_000 })),
    );
    resolved.addresses = replicas.map((r) => r.port);
    client = createClient(def, 'replicas:///svc', { deadlineMs: 10_000 });
    streams = createClient(chatV1.ChatServiceService, 'replicas:///svc', { deadlineMs: 10_000 });
  });
  afterAll(async () => {
    client.close();
    streams.close();
    await Promise.all(replicas.map((r) => r.server.stop(100)));
  });

  it('receives calls once the connections to the first three have aged, without a new client', async () => {
    await warmUp(client, ['a', 'b', 'c']);
    const fourth = await startReplica('d', { maxConnectionAgeMs: AGE_MS, maxConnectionAgeGraceMs: 10_000 });
    replicas.push(fourth);
    // The "DNS" now lists it; the client is not told: it finds out when a connection ends and it resolves again.
    resolved.addresses = replicas.map((r) => r.port);
    const resolutionsBefore = resolved.resolutions;
    const started = performance.now();
    // Calls go on until the newcomer has served some; bounded well past one connection age (±10 % jitter).
    while (fourth.served < 10 && performance.now() - started < 20 * AGE_MS) await callMany(client, 200, 20);
    const foundAfterMs = Math.round(performance.now() - started);
    console.log(`fourth replica served its first calls ${foundAfterMs} ms after it was added (connection age ${AGE_MS} ms)`);
    expect(fourth.served).toBeGreaterThanOrEqual(10);
    expect(resolved.resolutions).toBeGreaterThan(resolutionsBefore);
    // From then on the four share the calls.
    const counts = await callMany(client, 800);
    console.log(`800 calls over 4 replicas: ${JSON.stringify(counts)}`);
    expect(Object.keys(counts).sort()).toEqual(['a', 'b', 'c', 'd']);
    for (const n of Object.values(counts)) expect(n).toBeGreaterThanOrEqual(120);
  });

  it('lets a reply stream that outlives its connection age finish on the GOAWAY connection', async () => {
    // 12 messages 250 ms apart: three connection ages.
    const got: string[] = [];
    const stream = streams.streamReply({ sessionId: 's', afterEventId: '' }, { deadlineMs: 30_000 });
    const reading = (async () => {
      for await (const m of stream) got.push(m.id);
    })();
    // Meanwhile unary calls go on over the channels that replace the aged ones.
    const counts = await callMany(client, 300, 5);
    await reading;
    expect(got).toEqual(Array.from({ length: 12 }, (_, i) => `m:${i}`));
    expect(Object.values(counts).reduce((a, b) => a + b, 0)).toBe(300);
  });
});

/**
 * An HTTP/2 peer speaking gRPC's wire format that refuses (REFUSED_STREAM) the first `refuse` streams, as a server
 * closing an aged connection refuses the streams that crossed its GOAWAY, then answers each with `answer`.
 */
async function refusingPeer(refuse: number, answer: (path: string) => { status: number; messages: Buffer[] }) {
  const server = http2.createServer();
  const seen: string[] = [];
  server.on('stream', (stream, headers) => {
    const path = String(headers[':path']);
    seen.push(path);
    stream.on('error', () => {}); // a refused stream ends in an error on this side too
    if (seen.length <= refuse) return stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
    const { status, messages } = answer(path);
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': String(status), 'grpc-message': status ? 'down' : 'OK' }));
    // Length-prefixed messages (no compression), after the request has been read.
    stream.resume();
    stream.on('end', () => {
      for (const m of messages) {
        const prefix = Buffer.alloc(5);
        prefix.writeUInt32BE(m.length, 1);
        stream.write(Buffer.concat([prefix, m]));
      }
      stream.end();
    });
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  return { server, seen, address: `127.0.0.1:${(server.address() as AddressInfo).port}` };
}

describe('a call the server refused before reading it', () => {
  const jwks = (text: string) => Buffer.from(identityV1.GetJwksResponse.encode({ jwksJson: text }).finish());

  it('goes again (grpc-js retries once; a client whose every connection aged at once needs more)', async () => {
    const peer = await refusingPeer(2, () => ({ status: 0, messages: [jwks('third time')] }));
    const client = createClient(def, peer.address, { deadlineMs: 10_000 });
    try {
      expect(await client.getJwks({})).toEqual({ jwksJson: 'third time' });
      expect(peer.seen).toHaveLength(3);
    } finally {
      client.close();
      peer.server.close();
    }
  });

  it('a reply stream too, before anything came back', async () => {
    const reply = (id: string) => Buffer.from(chatV1.StreamReplyResponse.encode({ id, type: 'delta', messageId: 'm' } as never).finish());
    const peer = await refusingPeer(2, () => ({ status: 0, messages: [reply('m:0'), reply('m:1')] }));
    const streams = createClient(chatV1.ChatServiceService, peer.address, { deadlineMs: 10_000 });
    try {
      const got: string[] = [];
      for await (const m of streams.streamReply({ sessionId: 's', afterEventId: '' })) got.push(m.id);
      expect(got).toEqual(['m:0', 'm:1']);
      expect(peer.seen).toHaveLength(3);
    } finally {
      streams.close();
      peer.server.close();
    }
  });

  it('but a call the server processed and failed is not sent again (a write is never doubled)', async () => {
    const peer = await refusingPeer(0, () => ({ status: 14, messages: [] }));
    const client = createClient(def, peer.address, { deadlineMs: 10_000 });
    try {
      await expect(client.getJwks({})).rejects.toMatchObject({ code: 'SERVICE_UNAVAILABLE' });
      expect(peer.seen).toHaveLength(1);
    } finally {
      client.close();
      peer.server.close();
    }
  });
});
