import { request as httpRequest } from 'node:http';
import { connect, type Socket } from 'node:net';
import { startGateway } from '@svc/gateway';
import { client, createKey, eventually, expectError, signUp, type Account, type Client, type Res } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// What every route shares: envelope, request ids, 404/405/413/415, system routes, readiness.
let stack: Stack;
let api: Client;
let owner: Account;

beforeAll(async () => {
  stack = await startStack();
  api = client(stack.url);
  owner = await signUp(api, 'Core');
});
afterAll(() => stack.stop());

function expectEnvelope(res: Res) {
  expect(res.body.meta.request_id).toBe(res.headers.get('x-request-id'));
  expect(res.body.meta.timestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
}

/** Raw HTTP/1.1 exchange, for what fetch cannot send (chunked bodies without a length, odd request lines). */
function raw(method: string, path: string, headers: Record<string, string>, chunks: Buffer[] = []): Promise<Res> {
  const url = new URL(stack.url);
  return new Promise((ok, fail) => {
    const req = httpRequest({ host: url.hostname, port: url.port, method, path, headers }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => {
        let body: unknown;
        try {
          body = JSON.parse(text);
        } catch {
          body = undefined;
        }
        ok({ status: res.statusCode!, headers: new Headers(res.headers as Record<string, string>), body, text });
      });
    });
    req.on('error', fail);
    for (const c of chunks) req.write(c);
    req.end();
  });
}

describe('envelope and request ids', () => {
  it('wraps success in {data, meta} and sets X-Request-Id = meta.request_id', async () => {
    const res = await api.get('/api/v1/tenant', { token: owner.accessToken });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['data', 'meta']);
    expect(res.body.data).toEqual({ id: owner.tenantId, name: 'Core', plan: 'free', createdAt: expect.stringMatching(/Z$/) });
    expectEnvelope(res);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  });

  it('keeps a well-formed incoming X-Request-Id and replaces anything else', async () => {
    const kept = await api.get('/api/v1/tenant', { token: owner.accessToken, headers: { 'x-request-id': 'abc.DEF_123-x' } });
    expect(kept.headers.get('x-request-id')).toBe('abc.DEF_123-x');
    expect(kept.body.meta.request_id).toBe('abc.DEF_123-x');
    for (const bad of ['a'.repeat(129), 'has space', 'semi;colon', '<script>', 'ü']) {
      const res = await api.get('/api/v1/tenant', {
        token: owner.accessToken,
        headers: { 'x-request-id': encodeURI(bad) === bad ? bad : encodeURIComponent(bad) },
      });
      const id = res.headers.get('x-request-id')!;
      expect(id).not.toBe(bad);
      expect(id).toMatch(/^[A-Za-z0-9._-]{1,128}$/);
      expect(res.body.meta.request_id).toBe(id);
    }
    expect(
      (await api.get('/api/v1/tenant', { token: owner.accessToken, headers: { 'x-request-id': 'x'.repeat(128) } })).headers.get(
        'x-request-id',
      ),
    ).toBe('x'.repeat(128));
  });

  it('errors carry the request id too, and distinct requests get distinct ids', async () => {
    const a = await api.get('/api/v1/tenant');
    const b = await api.get('/api/v1/tenant');
    expectError(a, 401, 'UNAUTHORIZED');
    expectEnvelope(a);
    expect(Object.keys(a.body).sort()).toEqual(['error', 'meta']);
    expect(Object.keys(a.body.error).sort()).toEqual(['code', 'details', 'message']);
    expect(a.headers.get('x-request-id')).not.toBe(b.headers.get('x-request-id'));
  });

  it('the tenant comes only from the credential: X-Tenant-ID, and tenant ids in the query, are ignored', async () => {
    const other = await signUp(api, 'Elsewhere');
    const res = await api.get('/api/v1/tenant', { token: owner.accessToken, headers: { 'x-tenant-id': other.tenantId } });
    expect(res.body.data.id).toBe(owner.tenantId);
    const { key } = await createKey(api, owner.accessToken);
    const viaKey = await api.get('/api/v1/tenant', { token: key, headers: { 'x-tenant-id': other.tenantId } });
    expect(viaKey.body.data.id).toBe(owner.tenantId);
    const created = await api.post(
      '/api/v1/projects',
      { name: 'mine' },
      { token: owner.accessToken, headers: { 'x-tenant-id': other.tenantId } },
    );
    expect(created.status).toBe(201);
    expectError(await api.get(`/api/v1/projects/${created.body.data.id}`, { token: other.accessToken }), 404, 'RESOURCE_NOT_FOUND');
  });
});

describe('unknown routes and methods', () => {
  it('404 RESOURCE_NOT_FOUND with details.path for an unknown route, with or without a credential', async () => {
    for (const path of ['/api/v1/nothing-here', '/api/v2/projects', '/nope', '/api/v1/projects/x/y/z']) {
      for (const token of [undefined, owner.accessToken]) {
        const err = expectError(await api.get(`${path}?q=1`, { token }), 404, 'RESOURCE_NOT_FOUND');
        expect(err.details).toEqual({ path });
      }
    }
  });

  it('405 METHOD_NOT_ALLOWED with an Allow header for a known path and a wrong method', async () => {
    const cases: Array<[string, string, string[]]> = [
      ['PUT', '/api/v1/api-keys', ['GET', 'POST']],
      ['PATCH', '/api/v1/projects', ['GET', 'POST']],
      ['POST', '/api/v1/projects/prj_123', ['GET', 'PATCH', 'DELETE']],
      ['DELETE', '/api/v1/tenant', ['GET']],
      ['GET', '/api/v1/auth/login', ['POST']],
      ['PATCH', '/api/v1/tenant/security/network', ['GET', 'PUT']],
      ['POST', '/healthz', ['GET']],
      ['DELETE', '/readyz', ['GET']],
      ['POST', '/.well-known/jwks.json', ['GET']],
      ['PUT', '/api/v1/openapi.json', ['GET']],
    ];
    for (const [method, path, allowed] of cases) {
      const res = await api.request(method, path, { token: owner.accessToken });
      const err = expectError(res, 405, 'METHOD_NOT_ALLOWED');
      const allow = res.headers
        .get('allow')!
        .split(/,\s*/)
        .filter((m) => m !== 'HEAD');
      expect(allow.sort()).toEqual([...allowed].sort());
      expect(err.details.method).toBe(method);
    }
  });
});

describe('malformed requests are answered in the envelope', () => {
  it('a bad percent-encoding in the path is a 400 VALIDATION_ERROR', async () => {
    const res = await api.get('/api/v1/api-keys/%E0%A4%A', { token: owner.accessToken });
    expect(expectError(res, 400, 'VALIDATION_ERROR').details.reason).toBe('malformed_url');
  });

  it('a path parameter longer than any id is a 400 VALIDATION_ERROR', async () => {
    for (const n of [150, 1000]) {
      const err = expectError(await api.get(`/api/v1/api-keys/${'k'.repeat(n)}`, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
      expect(JSON.stringify(err.details)).not.toContain('k'.repeat(150));
    }
  });

  it('a request line or headers beyond the server limit get a 400 in the envelope, not a bare status', async () => {
    for (const res of [
      await raw('GET', `/api/v1/projects?cursor=${'c'.repeat(100_000)}`, { authorization: `Bearer ${owner.accessToken}` }),
      await raw('GET', '/api/v1/tenant', { authorization: `Bearer ${owner.accessToken}`, 'x-filler': 'f'.repeat(100_000) }),
    ]) {
      const err = expectError(res, 400, 'VALIDATION_ERROR');
      expect(err.details.reason).toBe('headers_too_large');
      expect(res.body.meta.request_id).toMatch(/^[A-Za-z0-9._-]+$/);
    }
  });
});

describe('bodies', () => {
  const big = (n: number) => JSON.stringify({ name: 'big', description: 'x'.repeat(n) });

  it('413 PAYLOAD_TOO_LARGE above 1 MiB (with a length, and chunked), and nothing is created', async () => {
    const before = (await api.get('/api/v1/projects?limit=100', { token: owner.accessToken })).body.data.length;
    expectError(
      await api.post('/api/v1/projects', undefined, {
        token: owner.accessToken,
        raw: big(1024 * 1024),
        headers: { 'content-type': 'application/json' },
      }),
      413,
      'PAYLOAD_TOO_LARGE',
    );
    const chunked = await raw(
      'POST',
      '/api/v1/projects',
      { authorization: `Bearer ${owner.accessToken}`, 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
      [Buffer.from(big(600 * 1024)), Buffer.from(big(600 * 1024))],
    );
    expectError(chunked, 413, 'PAYLOAD_TOO_LARGE');
    expect((await api.get('/api/v1/projects?limit=100', { token: owner.accessToken })).body.data.length).toBe(before);
    // Just under the limit is read (and refused by validation: the description is too long), not a 413.
    expectError(
      await api.post('/api/v1/projects', undefined, {
        token: owner.accessToken,
        raw: big(1024 * 1024 - 100),
        headers: { 'content-type': 'application/json' },
      }),
      400,
      'VALIDATION_ERROR',
    );
  });

  it('a refused body is read to its end: the client gets its 413 and the connection serves the next request', async () => {
    const url = new URL(stack.url);
    const socket = connect(Number(url.port), url.hostname);
    const received: Buffer[] = [];
    socket.on('data', (c: Buffer) => received.push(c));
    const text = () => Buffer.concat(received).toString('latin1');
    const waitFor = (pattern: RegExp) => eventually(async () => pattern.test(text()), 10_000);
    let socketError: Error | undefined;
    socket.on('error', (e) => (socketError = e));
    const length = 2 * 1024 * 1024;
    // Headers first, body after the answer: the order a client on a slow link sees, with no race left to lose.
    socket.write(
      `POST /api/v1/projects HTTP/1.1\r\nhost: ${url.host}\r\nauthorization: Bearer ${owner.accessToken}\r\n` +
        `content-type: application/json\r\ncontent-length: ${length}\r\n\r\n`,
    );
    await waitFor(/^HTTP\/1\.1 413 [\s\S]*PAYLOAD_TOO_LARGE/);
    expect(text()).not.toMatch(/\r\nconnection: close\r\n/i);
    await new Promise<void>((done) => socket.write(Buffer.alloc(length, 0x20), () => done()));
    socket.write(`GET /healthz HTTP/1.1\r\nhost: ${url.host}\r\n\r\n`);
    await waitFor(/HTTP\/1\.1 200 [\s\S]*$/);
    expect(socketError).toBeUndefined();
    socket.destroy();

    // A body beyond what is worth reading still closes the connection.
    const huge: Socket = connect(Number(url.port), url.hostname);
    let answer = '';
    huge.on('data', (c: Buffer) => (answer += c.toString('latin1')));
    huge.on('error', () => undefined);
    huge.write(
      `POST /api/v1/projects HTTP/1.1\r\nhost: ${url.host}\r\nauthorization: Bearer ${owner.accessToken}\r\n` +
        `content-type: application/json\r\ncontent-length: ${64 * 1024 * 1024}\r\n\r\n`,
    );
    await new Promise((done) => huge.on('close', done));
    expect(answer).toMatch(/^HTTP\/1\.1 413 [\s\S]*\r\nconnection: close\r\n/i);
  });

  it('415 UNSUPPORTED_MEDIA_TYPE for anything but JSON; JSON with a charset is fine', async () => {
    const before = (await api.get('/api/v1/projects?limit=100', { token: owner.accessToken })).body.data.length;
    for (const type of [
      'text/plain',
      'application/x-www-form-urlencoded',
      'multipart/form-data; boundary=x',
      'application/xml',
      'application/jsonx',
    ]) {
      const res = await api.post('/api/v1/projects', undefined, {
        token: owner.accessToken,
        raw: '{"name":"typed"}',
        headers: { 'content-type': type },
      });
      expectError(res, 415, 'UNSUPPORTED_MEDIA_TYPE');
    }
    const noType = await raw('POST', '/api/v1/projects', { authorization: `Bearer ${owner.accessToken}`, 'content-length': '16' }, [
      Buffer.from('{"name":"typed"}'),
    ]);
    expectError(noType, 415, 'UNSUPPORTED_MEDIA_TYPE');
    expect((await api.get('/api/v1/projects?limit=100', { token: owner.accessToken })).body.data.length).toBe(before);
    const ok = await api.post('/api/v1/projects', undefined, {
      token: owner.accessToken,
      raw: '{"name":"typed"}',
      headers: { 'content-type': 'application/json; charset=utf-8' },
    });
    expect(ok.status).toBe(201);
  });

  it('an empty body with a JSON content type is no body: fine where none is needed, a 400 where one is', async () => {
    const u = await signUp(api, 'Empty');
    const headers = { 'content-type': 'application/json' };
    const missing = expectError(
      await api.post('/api/v1/projects', undefined, { token: u.accessToken, raw: '', headers }),
      400,
      'VALIDATION_ERROR',
    );
    expect(missing.details.fields).toEqual([{ field: 'body', message: 'body must be object' }]);
    const out = await api.post('/api/v1/auth/logout', undefined, { token: u.accessToken, raw: '', headers });
    expect(out.status).toBe(200);
  });

  it('authentication comes before body checks: no credential is 401 whatever the body', async () => {
    expectError(
      await api.post('/api/v1/projects', undefined, { raw: big(2 * 1024 * 1024), headers: { 'content-type': 'application/json' } }),
      401,
      'UNAUTHORIZED',
    );
    expectError(
      await api.post('/api/v1/projects', undefined, { raw: 'x', headers: { 'content-type': 'text/plain' } }),
      401,
      'UNAUTHORIZED',
    );
  });
});

describe('system routes', () => {
  it('/healthz answers 200 without a credential', async () => {
    const res = await api.get('/healthz');
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ status: 'ok' });
    expectEnvelope(res);
  });

  it('/readyz answers 200 naming every service as up', async () => {
    const res = await api.get('/readyz');
    expect(res.status).toBe(200);
    const every = Object.fromEntries(Object.keys(stack.services).map((name) => [name, 'up']));
    expect(Object.keys(every)).toEqual(expect.arrayContaining(['identity', 'projects']));
    expect(res.body.data).toEqual({ status: 'ready', services: every });
  });

  it('/.well-known/jwks.json publishes the ES256 public key that verifies access tokens, and nothing private', async () => {
    const res = await api.get('/.well-known/jwks.json');
    expect(res.status).toBe(200);
    expect(res.body.keys.length).toBeGreaterThanOrEqual(1);
    for (const k of res.body.keys) {
      expect(k).toMatchObject({ kty: 'EC', crv: 'P-256', kid: expect.any(String) });
      expect(k).not.toHaveProperty('d');
    }
    const { kid } = JSON.parse(Buffer.from(owner.accessToken.split('.')[0], 'base64url').toString());
    expect(res.body.keys.map((k: { kid: string }) => k.kid)).toContain(kid);
    const { importJWK, jwtVerify } = await import('jose');
    const jwk = res.body.keys.find((k: { kid: string }) => k.kid === kid);
    const { payload } = await jwtVerify(owner.accessToken, await importJWK(jwk, 'ES256'), { issuer: 'svc-identity', audience: 'svc-api' });
    expect(payload.tid).toBe(owner.tenantId);
  });

  it('/api/v1/openapi.json is OpenAPI 3.1 and documents every route of the gateway', async () => {
    const res = await api.get('/api/v1/openapi.json');
    expect(res.status).toBe(200);
    expect(res.body.openapi).toBe('3.1.0');
    const ops = Object.entries(res.body.paths as Record<string, Record<string, unknown>>).flatMap(([p, m]) =>
      Object.keys(m).map((x) => `${x.toUpperCase()} ${p}`),
    );
    expect(ops).toEqual(
      expect.arrayContaining([
        'POST /api/v1/auth/register',
        'POST /api/v1/auth/login',
        'POST /api/v1/auth/refresh',
        'POST /api/v1/auth/logout',
        'GET /api/v1/auth/me',
        'GET /api/v1/tenant',
        'GET /api/v1/tenant/team/members',
        'POST /api/v1/tenant/team/members',
        'PATCH /api/v1/tenant/team/members/{userId}',
        'DELETE /api/v1/tenant/team/members/{userId}',
        'POST /api/v1/api-keys',
        'GET /api/v1/api-keys',
        'GET /api/v1/api-keys/{id}',
        'DELETE /api/v1/api-keys/{id}',
        'GET /api/v1/tenant/security/network',
        'PUT /api/v1/tenant/security/network',
      ]),
    );
    const create = res.body.paths['/api/v1/api-keys'].post;
    expect(create.requestBody.content['application/json'].schema.additionalProperties).toBe(false);
    expect(create.responses['201']).toBeDefined();
    expect(res.body.paths['/api/v1/auth/login'].post.security).toEqual([]);
  });
});

// Last: stops a service of the shared stack.
describe('readiness when a service is down', () => {
  it('/readyz answers 503 naming the service that is down, and its routes answer 503, not 500', async () => {
    await stack.services.projects.stop();
    await eventually(async () => (await api.get('/readyz')).status === 503);
    const res = await api.get('/readyz');
    const err = expectError(res, 503, 'SERVICE_UNAVAILABLE');
    expect(err.details.down).toEqual(['projects']);
    const expected = Object.fromEntries(Object.keys(stack.services).map((name) => [name, name === 'projects' ? 'down' : 'up']));
    expect(err.details.services).toEqual(expected);
    expect(err.message).toContain('projects');
    expectError(await api.get('/api/v1/projects', { token: owner.accessToken }), 503, 'SERVICE_UNAVAILABLE');
    // The rest still works, and liveness is unaffected.
    expect((await api.get('/api/v1/tenant', { token: owner.accessToken })).status).toBe(200);
    expect((await api.get('/healthz')).status).toBe(200);
  });
});

it('stops with a connection open that never sent a request (a spare client connection does not hold it open)', async () => {
  const gateway = await startGateway({ ...stack.env, PORT: '0', INSTANCE_ID: 'gw-stopping' });
  const spare: Socket = connect(gateway.port, '127.0.0.1');
  await new Promise((resolve) => spare.once('connect', resolve));
  const closed = new Promise((resolve) => spare.once('close', resolve));
  // Node's server.close() waits for such a connection (its headers timeout is not checked once closing began).
  await gateway.stop();
  await closed;
  expect(spare.destroyed).toBe(true);
});
