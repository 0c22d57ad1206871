import * as grpc from '@grpc/grpc-js';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { chatV1, identityV1 } from '@svc/proto';
import { AppError } from '../errors';
import { JwtVerifier } from '../jwt';
import { createLogger } from '../logger';
import { DuplicateKeyError } from '../storage/types';
import { checkHealth, createClient, toAppError } from './client';
import { GrpcServer, registration } from './server';
import type { CallContext } from './types';

// A real server on a loopback port and a real client: the error mapping, auth metadata, deadlines and health.
const def = identityV1.IdentityServiceService;
let server: GrpcServer;
/** Over the socket: `ipv4:` names the same server, but no in-process server registers that form (local.ts). */
let client: ReturnType<typeof createClient<typeof def>>;
/** The same server by its plain address: called in-process (local.ts). */
let local: ReturnType<typeof createClient<typeof def>>;
let streams: ReturnType<typeof createClient<typeof chatV1.ChatServiceService>>;
let token: string;
let seen: CallContext | null = null;
/** Handlers of endless streams that saw their caller give up and ended. */
let stopped = 0;
/** Resolves once `done()` holds, checked on every turn of the event loop. */
const until = (done: () => boolean) =>
  new Promise<void>((resolve) => {
    const check = () => (done() ? resolve() : setImmediate(check));
    check();
  });

beforeAll(async () => {
  const { privateKey, publicKey } = await generateKeyPair('ES256');
  const jwk = { ...(await exportJWK(publicKey)), kid: 'k1', alg: 'ES256' };
  token = await new SignJWT({ tid: 'ten_1', typ: 'user', role: 'owner', sid: 'ses_1' })
    .setProtectedHeader({ alg: 'ES256', kid: 'k1' })
    .setSubject('usr_1')
    .setIssuer('iss')
    .setAudience('aud')
    .setIssuedAt()
    .setExpirationTime('5m')
    .setJti('j')
    .sign(privateKey);
  const verifier = new JwtVerifier({ issuer: 'iss', audience: 'aud', fetchJwks: async () => ({ keys: [jwk] }) });
  server = new GrpcServer({
    host: '127.0.0.1',
    port: 0,
    logger: createLogger('test', 'silent'),
    verifier,
    healthNames: ['identity.v1.IdentityService'],
  });
  const fail = () => Promise.reject(new Error('not used'));
  const impl = Object.fromEntries(Object.keys(def).map((k) => [k, fail])) as never as Record<string, unknown>;
  Object.assign(impl, {
    getTenant: async (_req: unknown, ctx: CallContext) => {
      seen = ctx;
      return { tenant: { id: ctx.auth!.tid, name: 'T', plan: 'free', createdAt: '' } };
    },
    getApiKey: async (req: { id: string }) => {
      if (req.id === 'dup') throw new DuplicateKeyError('api_keys', ['hash']);
      if (req.id === 'boom') throw new Error('secret internal detail');
      if (req.id === 'slow') await new Promise((r) => setTimeout(r, 500));
      throw new AppError('RESOURCE_NOT_FOUND', 'api_key not found', { resource: 'api_key', id: req.id });
    },
    getJwks: async () => ({ jwksJson: '{}' }),
  });
  server.add(registration({ definition: def, implementation: impl as never, publicMethods: ['getJwks'] }));
  const chatImpl = Object.fromEntries(Object.keys(chatV1.ChatServiceService).map((k) => [k, fail])) as never as Record<string, unknown>;
  chatImpl.streamReply = async (req: { sessionId: string }, _ctx: CallContext, send: (m: object) => Promise<void>, signal: AbortSignal) => {
    await send({ id: '1', type: 'open', messageId: 'm' });
    // Goes on until its caller gives it up: a message every `ms`, or only the first.
    const ms = { endless: 0, ticking: 20 }[req.sessionId];
    if (ms !== undefined) {
      for (let i = 2; !signal.aborted; i++) {
        await new Promise((resolve) => (ms ? setTimeout(resolve, ms) : signal.addEventListener('abort', resolve)));
        await send({ id: String(i), type: 'delta', messageId: 'm' });
      }
      stopped += 1;
      return;
    }
    if (req.sessionId === 'missing')
      throw new AppError('RESOURCE_NOT_FOUND', 'chat_session not found', { resource: 'chat_session', id: 'missing' });
  };
  server.add(registration({ definition: chatV1.ChatServiceService, implementation: chatImpl as never }));
  const port = await server.start();
  client = createClient(def, `ipv4:127.0.0.1:${port}`, { deadlineMs: 2000 });
  local = createClient(def, `127.0.0.1:${port}`, { deadlineMs: 2000 });
  streams = createClient(chatV1.ChatServiceService, `127.0.0.1:${port}`, { deadlineMs: 2000 });
});

afterAll(async () => {
  client.close();
  local.close();
  streams.close();
  await server.stop();
});

it('passes the verified claims, request id, client address and user agent to the handler', async () => {
  const res = await client.getTenant({}, { token, requestId: 'req-1', clientIp: '10.1.2.3', userAgent: 'curl/8.0 \u00e9\n' });
  expect(res.tenant?.id).toBe('ten_1');
  expect(seen).toMatchObject({
    auth: { sub: 'usr_1', tid: 'ten_1', role: 'owner' },
    requestId: 'req-1',
    clientIp: '10.1.2.3',
    // Printable ASCII only (metadata values are ASCII), at most 256 characters.
    userAgent: 'curl/8.0 ??',
  });
  await client.getTenant({}, { token, userAgent: 'x'.repeat(1000) });
  expect(seen!.userAgent).toBe('x'.repeat(256));
  await client.getTenant({}, { token });
  expect(seen!.userAgent).toBeNull();
});

it('also accepts the standard authorization header (for tools such as grpcurl)', async () => {
  const md = new grpc.Metadata();
  md.set('authorization', `Bearer ${token}`);
  const res = await new Promise<unknown>((ok, fail) =>
    client.grpcClient.makeUnaryRequest(
      def.getTenant.path,
      def.getTenant.requestSerialize,
      def.getTenant.responseDeserialize,
      {},
      md,
      {},
      (err, r) => (err ? fail(err) : ok(r)),
    ),
  );
  expect(res).toMatchObject({ tenant: { id: 'ten_1' } });
});

it('refuses protected methods without a valid JWT and allows public ones', async () => {
  await expect(client.getTenant({})).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
  await expect(client.getTenant({}, { token: token.slice(0, -4) + 'AAAA' })).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
  await expect(client.getJwks({})).resolves.toEqual({ jwksJson: '{}' });
});

it('carries an AppError with its details across the wire', async () => {
  const err = await client.getApiKey({ id: 'key_9' }, { token }).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(AppError);
  expect(err).toMatchObject({ code: 'RESOURCE_NOT_FOUND', details: { resource: 'api_key', id: 'key_9' } });
});

it('maps storage conflicts to CONFLICT and hides unknown errors behind INTERNAL_ERROR', async () => {
  await expect(client.getApiKey({ id: 'dup' }, { token })).rejects.toMatchObject({ code: 'CONFLICT' });
  const err = (await client.getApiKey({ id: 'boom' }, { token }).catch((e: unknown) => e)) as AppError;
  expect(err.code).toBe('INTERNAL_ERROR');
  expect(err.message).not.toContain('secret internal detail');
});

it('gives every call a deadline', async () => {
  await expect(client.getApiKey({ id: 'slow' }, { token, deadlineMs: 100 })).rejects.toMatchObject({ code: 'GATEWAY_TIMEOUT' });
});

it('calls a server of this process without the socket, answering as over it', async () => {
  const outcome = (p: Promise<unknown>) =>
    p.then(
      (value) => ({ value }),
      (err: AppError) => ({ error: { name: err.constructor.name, code: err.code, message: err.message, details: err.details } }),
    );
  const calls = (c: typeof client) => [
    // (Its metadata as grpc-js gives it, less grpc-js's own user-agent, which no handler reads.)
    () =>
      c.getTenant({}, { token, requestId: 'req-2', clientIp: '10.1.2.3', userAgent: 'ua' }).then((r) => {
        const metadata = seen!.metadata.getMap();
        delete metadata['user-agent'];
        return { r, seen: { ...seen, metadata } };
      }),
    () => c.getTenant({}),
    () => c.getJwks({}),
    () => c.getApiKey({ id: 'key_9' }, { token }),
    () => c.getApiKey({ id: 'dup' }, { token }),
    () => c.getApiKey({ id: 'boom' }, { token }),
    () => c.getApiKey({ id: 'slow' }, { token, deadlineMs: 100 }),
  ];
  const over: unknown[] = [];
  for (const call of calls(client)) over.push(await outcome(call()));
  const within: unknown[] = [];
  for (const call of calls(local)) within.push(await outcome(call()));
  expect(within).toEqual(over);
  expect(over[6]).toMatchObject({ error: { code: 'GATEWAY_TIMEOUT' } });
  // The plain address never opened a connection: every call above was answered in-process.
  expect(local.grpcClient.getChannel().getConnectivityState(false)).toBe(grpc.connectivityState.IDLE);
  // Upstream time is counted as over the socket.
  const timing = { upstreamMs: 0 };
  await local.getJwks({}, { timing });
  expect(timing.upstreamMs).toBeGreaterThan(0);
});

/** A second server of this process whose one working method is the public `getJwks`; every other method fails. */
async function jwksServer(getJwks: () => Promise<{ jwksJson: string }>, options: { inProcess?: boolean } = {}) {
  const server = new GrpcServer({
    host: '127.0.0.1',
    port: 0,
    logger: createLogger('test', 'silent'),
    verifier: null as never,
    healthNames: [],
    ...options,
  });
  const impl: Record<string, unknown> = Object.fromEntries(Object.keys(def).map((k) => [k, () => Promise.reject(new Error('not used'))]));
  impl.getJwks = getJwks;
  server.add(registration({ definition: def, implementation: impl as never, publicMethods: ['getJwks'] }));
  return { server, port: await server.start() };
}

it('a stopping server takes no more in-process calls, and waits for those it is answering', async () => {
  let release: (() => void) | null = null;
  const { server: second, port: p2 } = await jwksServer(async () => {
    await new Promise<void>((r) => (release = r));
    return { jwksJson: '{"k":1}' };
  });
  const near = createClient(def, `127.0.0.1:${p2}`, { deadlineMs: 2000 });
  const inFlight = near.getJwks({});
  await until(() => release !== null);
  let stopped2 = false;
  const stopping = second.stop().then(() => (stopped2 = true));
  await new Promise((r) => setTimeout(r, 50));
  // Still answering its in-process call; a new one goes to the socket, which is shutting down.
  expect(stopped2).toBe(false);
  await expect(near.getJwks({}, { deadlineMs: 300 })).rejects.toMatchObject({
    code: expect.stringMatching(/SERVICE_UNAVAILABLE|GATEWAY_TIMEOUT/),
  });
  release!();
  await expect(inFlight).resolves.toEqual({ jwksJson: '{"k":1}' });
  await stopping;
  near.close();
});

it('a server started with inProcess false is called over its socket, from this process too', async () => {
  const { server: socketOnly, port } = await jwksServer(async () => ({ jwksJson: '{"k":2}' }), { inProcess: false });
  const near = createClient(def, `127.0.0.1:${port}`, { deadlineMs: 2000 });
  await expect(near.getJwks({})).resolves.toEqual({ jwksJson: '{"k":2}' });
  expect(near.grpcClient.getChannel().getConnectivityState(false)).toBe(grpc.connectivityState.READY);
  near.close();
  await socketOnly.stop();
});

it('answers the gRPC health service, and a stopped server is unavailable', async () => {
  expect(await checkHealth(client.grpcClient)).toBe(true);
  expect(await checkHealth(client.grpcClient, 'identity.v1.IdentityService')).toBe(true);
  const other = createClient(def, '127.0.0.1:1', { deadlineMs: 500 });
  expect(await checkHealth(other.grpcClient, '', 300)).toBe(false);
  await expect(other.getJwks({})).rejects.toMatchObject({ code: expect.stringMatching(/SERVICE_UNAVAILABLE|GATEWAY_TIMEOUT/) });
  other.close();
});

it('streams messages, and an AppError thrown mid-stream reaches the client with its details', async () => {
  const ok: unknown[] = [];
  for await (const m of streams.streamReply({ sessionId: 's', afterEventId: '' }, { token })) ok.push(m);
  expect(ok).toMatchObject([{ type: 'open', messageId: 'm' }]);
  const seen: unknown[] = [];
  const err = await (async () => {
    for await (const m of streams.streamReply({ sessionId: 'missing', afterEventId: '' }, { token })) seen.push(m);
  })().catch((e: unknown) => e);
  expect(seen).toHaveLength(1);
  expect(err).toBeInstanceOf(AppError);
  expect(err).toMatchObject({ code: 'RESOURCE_NOT_FOUND', details: { resource: 'chat_session', id: 'missing' } });
});

it('ends streams given up early on the stream itself: 1,500 in a row reset no connection', async () => {
  // Each given up at once would cross as an RST_STREAM, and Node's HTTP/2 server answers more than 1,000 at over 33
  // a second by closing the connection (GOAWAY), failing every call on it: a stream beside them, and those opening.
  const beside = streams.streamReply({ sessionId: 'ticking', afterEventId: '' }, { token });
  const besideEvents = beside[Symbol.asyncIterator]();
  await besideEvents.next();
  const before = stopped;
  const failures: unknown[] = [];
  let left = 1500;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      for (; left > 0; left -= 1) {
        const stream = streams.streamReply({ sessionId: 'endless', afterEventId: '' }, { token });
        await stream[Symbol.asyncIterator]()
          .next()
          .catch((err: unknown) => failures.push(err));
        stream.cancel();
      }
    }),
  );
  expect(failures).toEqual([]);
  await expect(besideEvents.next()).resolves.toMatchObject({ done: false, value: { type: 'delta' } });
  beside.cancel();
  await expect(client.getTenant({}, { token })).resolves.toMatchObject({ tenant: { id: 'ten_1' } });
  // Every handler saw its caller leave, and ended (the client reads until the service's end).
  await until(() => stopped - before >= 1501);
});

it('a stream left by a `break` is asked to end too', async () => {
  const before = stopped;
  for await (const m of streams.streamReply({ sessionId: 'endless', afterEventId: '' }, { token })) if (m.type === 'open') break;
  await until(() => stopped > before);
});

it('serves a standard server-streaming client (grpcurl) as before: its half-close after the request stops nothing', async () => {
  const md = new grpc.Metadata();
  md.set('svc-token', token);
  const def = chatV1.ChatServiceService.streamReply;
  const call = streams.grpcClient.makeServerStreamRequest(
    def.path,
    def.requestSerialize,
    def.responseDeserialize,
    { sessionId: 's', afterEventId: '' },
    md,
  );
  const got: unknown[] = [];
  for await (const m of call) got.push(m);
  expect(got).toMatchObject([{ type: 'open', messageId: 'm' }]);
});

it('reads a stream from a service from before the convention (it waits for the half-close), a moment late', async () => {
  // grpc-js serving the method as server streaming, as every service did: its handler starts on the half-close.
  const legacy = new grpc.Server();
  legacy.addService({ streamReply: chatV1.ChatServiceService.streamReply } as never, {
    streamReply: (call: grpc.ServerWritableStream<{ sessionId: string }, unknown>) => {
      call.write({ id: '1', type: 'open', messageId: call.request.sessionId });
      call.end();
    },
  });
  const port = await new Promise<number>((ok, fail) =>
    legacy.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? fail(err) : ok(p))),
  );
  const old = createClient(chatV1.ChatServiceService, `127.0.0.1:${port}`, { deadlineMs: 10_000, streamHeadersWaitMs: 300 });
  try {
    const got: unknown[] = [];
    for await (const m of old.streamReply({ sessionId: 'legacy', afterEventId: '' })) got.push(m);
    expect(got).toMatchObject([{ type: 'open', messageId: 'legacy' }]);
  } finally {
    old.close();
    legacy.forceShutdown();
  }
});

describe('no caller input can end the server', () => {
  const odd = ['é', '💥', 'a\u200bb', '\u202eevil', '\u0000nul', 'ä'.repeat(2000)];

  it.each(odd)('carries an app error whose details hold %j intact, and keeps serving', async (id) => {
    const err = await client.getApiKey({ id }, { token }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    expect(err).toMatchObject({ code: 'RESOURCE_NOT_FOUND', details: { resource: 'api_key', id } });
    await expect(client.getTenant({}, { token })).resolves.toMatchObject({ tenant: { id: 'ten_1' } });
  });

  it('answers a streamed call whose error details are not ASCII', async () => {
    const err = await (async () => {
      for await (const m of streams.streamReply({ sessionId: 'missing', afterEventId: '' }, { token })) void m;
    })().catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'RESOURCE_NOT_FOUND' });
  });

  it('replaces a request id or client address that is not safe to log or forward', async () => {
    const md = new grpc.Metadata();
    md.set('svc-token', token);
    md.set('x-request-id', 'a b;c <script>');
    md.set('x-client-ip', 'not an ip');
    await new Promise<void>((resolve, reject) =>
      client.grpcClient.makeUnaryRequest(
        '/identity.v1.IdentityService/GetTenant',
        (v: object) => Buffer.from(identityV1.GetTenantRequest.encode(v as never).finish()),
        (b: Buffer) => b,
        {},
        md,
        (err) => (err ? reject(err) : resolve()),
      ),
    );
    expect(seen!.requestId).toMatch(/^[0-9a-f-]{36}$/);
    expect(seen!.clientIp).toBeNull();
  });

  it('still reads the text error key of earlier versions', () => {
    const md = new grpc.Metadata();
    md.set('x-app-error', JSON.stringify({ code: 'CONFLICT', message: 'taken', details: { field: 'name' } }));
    const err = toAppError(Object.assign(new Error('x'), { code: grpc.status.ALREADY_EXISTS, details: 'taken', metadata: md }));
    expect(err).toMatchObject({ code: 'CONFLICT', message: 'taken', details: { field: 'name' } });
  });
});
