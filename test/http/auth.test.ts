import { SignJWT, generateKeyPair, decodeJwt, decodeProtectedHeader } from 'jose';
import { startStack, type Stack } from '../helpers/stack';
import { client, createKey, expectError, signUp, type Client } from '../helpers/http';
import { realSigningKey } from '../helpers/tokens';

let stack: Stack;
let api: Client;

beforeAll(async () => {
  stack = await startStack();
  api = client(stack.url);
});
afterAll(() => stack.stop());

describe('register and login', () => {
  it('registers a tenant and owner, sets the session cookie, and answers 201 with tokens', async () => {
    const email = `reg${Date.now()}@example.com`;
    const res = await api.post('/api/v1/auth/register', { email, password: 'password123', name: 'Reg', tenantName: 'Reg Co' });
    expect(res.status).toBe(201);
    expect(res.body.data.user).toMatchObject({ email, name: 'Reg', role: 'owner' });
    expect(res.body.data.tenant).toMatchObject({ name: 'Reg Co', plan: 'free' });
    expect(res.body.data.tenant.createdAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(res.body.data.expiresIn).toBe(900);
    const cookie = res.headers.get('set-cookie')!;
    expect(cookie).toMatch(/^svc_session=svc_sess_[A-Za-z0-9]+; Path=\/; HttpOnly; SameSite=Lax/);
    expect(res.body.data).not.toHaveProperty('user.passwordHash');

    const header = decodeProtectedHeader(res.body.data.accessToken);
    expect(header.alg).toBe('ES256');
    expect(header.kid).toBeTruthy();
    const claims = decodeJwt(res.body.data.accessToken);
    expect(claims).toMatchObject({
      sub: res.body.data.user.id,
      tid: res.body.data.tenant.id,
      typ: 'user',
      iss: 'svc-identity',
      aud: 'svc-api',
    });
    expect(claims.exp! - claims.iat!).toBe(900);
  });

  it('refuses a taken email with 409 and a second tenant is not created', async () => {
    const a = await signUp(api);
    const res = await api.post('/api/v1/auth/register', {
      email: a.email.toUpperCase(),
      password: 'password123',
      name: 'X',
      tenantName: 'X',
    });
    expectError(res, 409, 'CONFLICT');
  });

  it('logs in with the right password and refuses a wrong one or unknown email with 401', async () => {
    const a = await signUp(api);
    const ok = await api.post('/api/v1/auth/login', { email: a.email, password: a.password });
    expect(ok.status).toBe(200);
    expect(ok.body.data.user.id).toBe(a.userId);
    expectError(await api.post('/api/v1/auth/login', { email: a.email, password: 'wrong password' }), 401, 'UNAUTHORIZED');
    expectError(await api.post('/api/v1/auth/login', { email: 'nobody@example.com', password: 'whatever1' }), 401, 'UNAUTHORIZED');
  });

  it('answers validation errors with field details', async () => {
    const res = await api.post('/api/v1/auth/register', { email: 'not-an-email', password: 'short', name: '', tenantName: 'T' });
    const err = expectError(res, 400, 'VALIDATION_ERROR');
    const fields = err.details.fields.map((f: { field: string }) => f.field).sort();
    expect(fields).toEqual(expect.arrayContaining(['name', 'password']));
  });
});

describe('me, with every kind of credential', () => {
  it('describes a user session', async () => {
    const a = await signUp(api);
    const res = await api.get('/api/v1/auth/me', { token: a.accessToken });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({
      user: { id: a.userId, email: a.email },
      tenant: { id: a.tenantId },
      role: 'owner',
      credential: { type: 'user' },
    });
    expect(res.body.data.credential).not.toHaveProperty('scopes');
  });

  it('shows the session as the credential, with nothing else', async () => {
    const a = await signUp(api);
    const res = await api.get('/api/v1/auth/me', { token: a.accessToken });
    expect(res.body.data.credential).toEqual({ type: 'user', id: decodeJwt(a.accessToken).sid });
    expect(res.body.data.user).toEqual({
      id: a.userId,
      email: a.email,
      name: expect.any(String),
      role: 'owner',
      createdAt: expect.stringMatching(/Z$/),
      emailVerified: false,
    });
  });

  it('accepts the session cookie', async () => {
    const a = await signUp(api);
    const res = await api.get('/api/v1/auth/me', { cookie: a.cookie });
    expect(res.status).toBe(200);
    expect(res.body.data.user.id).toBe(a.userId);
  });

  it('describes an API key with its environment and scopes', async () => {
    const a = await signUp(api);
    const created = await api.post(
      '/api/v1/api-keys',
      { name: 'ci', type: 'ci', environment: 'staging', scopes: ['projects:read'] },
      { token: a.accessToken },
    );
    const res = await api.get('/api/v1/auth/me', { token: created.body.data.key });
    expect(res.status).toBe(200);
    expect(res.body.data.credential).toEqual({
      type: 'api_key',
      id: created.body.data.id,
      environment: 'staging',
      scopes: ['projects:read'],
    });
  });

  it('refuses a missing, malformed or unknown credential with 401', async () => {
    expectError(await api.get('/api/v1/auth/me'), 401, 'UNAUTHORIZED');
    expectError(await api.get('/api/v1/auth/me', { headers: { authorization: 'Basic abc' } }), 401, 'UNAUTHORIZED');
    expectError(await api.get('/api/v1/auth/me', { token: 'svc_sdk_' + 'x'.repeat(43) }), 401, 'UNAUTHORIZED');
    expectError(await api.get('/api/v1/auth/me', { cookie: 'svc_session=svc_sess_' + 'y'.repeat(43) }), 401, 'UNAUTHORIZED');
  });
});

describe('access tokens that must be refused', () => {
  let a: Awaited<ReturnType<typeof signUp>>;
  beforeAll(async () => {
    a = await signUp(api);
  });
  const claimsOf = () => {
    const c = decodeJwt(a.accessToken);
    return { sub: c.sub, tid: c.tid, typ: 'user', role: 'owner', sid: c.sid };
  };

  it('alg none', async () => {
    const enc = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
    const token = `${enc({ alg: 'none', typ: 'JWT' })}.${enc({ ...claimsOf(), iss: 'svc-identity', aud: 'svc-api', exp: 9999999999, iat: 1, jti: 'x' })}.`;
    expectError(await api.get('/api/v1/auth/me', { token }), 401, 'UNAUTHORIZED');
  });

  it('HS256 keyed with the public key', async () => {
    const jwks = (await api.get('/.well-known/jwks.json')).body;
    const secret = new TextEncoder().encode(JSON.stringify(jwks.keys[0]));
    const token = await new SignJWT(claimsOf())
      .setProtectedHeader({ alg: 'HS256', kid: jwks.keys[0].kid })
      .setIssuer('svc-identity')
      .setAudience('svc-api')
      .setIssuedAt()
      .setExpirationTime('5m')
      .setJti('j1')
      .sign(secret);
    expectError(await api.get('/api/v1/auth/me', { token }), 401, 'UNAUTHORIZED');
  });

  it('a foreign key with an unknown kid, and a foreign key claiming a known kid', async () => {
    const { privateKey } = await generateKeyPair('ES256');
    const jwks = (await api.get('/.well-known/jwks.json')).body;
    for (const kid of ['unknown-kid', jwks.keys[0].kid]) {
      const token = await new SignJWT(claimsOf())
        .setProtectedHeader({ alg: 'ES256', kid })
        .setIssuer('svc-identity')
        .setAudience('svc-api')
        .setIssuedAt()
        .setExpirationTime('5m')
        .setJti('j2')
        .sign(privateKey);
      expectError(await api.get('/api/v1/auth/me', { token }), 401, 'UNAUTHORIZED');
    }
  });

  describe('signed with the real key, but', () => {
    let sign: Awaited<ReturnType<typeof realSigningKey>>['sign'];
    let kid: string;
    const now = () => Math.floor(Date.now() / 1000);
    const valid = () => ({
      ...claimsOf(),
      iss: 'svc-identity',
      aud: 'svc-api',
      iat: now() - 10,
      exp: now() + 300,
      jti: `j${Math.random()}`,
    });
    beforeAll(async () => {
      ({ sign, kid } = await realSigningKey(stack.dataDir));
    });

    it('a control: the same forging path with valid claims is accepted', async () => {
      const res = await api.get('/api/v1/auth/me', { token: await sign(valid()) });
      expect(res.status).toBe(200);
      expect(res.body.data.user.id).toBe(a.userId);
    });

    it('expired', async () => {
      const token = await sign({ ...valid(), iat: now() - 1000, exp: now() - 5 });
      expect(expectError(await api.get('/api/v1/auth/me', { token }), 401, 'UNAUTHORIZED').message).toMatch(/expired/i);
    });

    it('a wrong issuer or audience', async () => {
      for (const patch of [{ iss: 'someone-else' }, { aud: 'another-api' }, { aud: ['another-api'] }]) {
        expectError(await api.get('/api/v1/auth/me', { token: await sign({ ...valid(), ...patch }) }), 401, 'UNAUTHORIZED');
      }
    });

    it('missing or malformed claims (tenant, type, role, scopes)', async () => {
      const broken = [
        { tid: undefined },
        { typ: 'admin' },
        { role: 'root' },
        { scp: 'projects:read' },
        { sid: undefined },
        { exp: undefined },
      ];
      for (const patch of broken) {
        expectError(await api.get('/api/v1/auth/me', { token: await sign({ ...valid(), ...patch }) }), 401, 'UNAUTHORIZED');
      }
    });

    it('an unknown kid', async () => {
      expectError(await api.get('/api/v1/auth/me', { token: await sign(valid(), { kid: `${kid}-rotated` }) }), 401, 'UNAUTHORIZED');
    });

    it('expired after it was accepted (cached verification does not outlive exp)', async () => {
      const token = await sign({ ...valid(), exp: now() + 2 });
      expect((await api.get('/api/v1/auth/me', { token })).status).toBe(200);
      let status = 200;
      const t0 = Date.now();
      while (status === 200 && Date.now() - t0 < 5000) {
        await new Promise((r) => setTimeout(r, 200));
        status = (await api.get('/api/v1/auth/me', { token })).status;
      }
      expect(status).toBe(401);
    });
  });

  it('a tampered payload', async () => {
    const [h, , s] = a.accessToken.split('.');
    const payload = Buffer.from(JSON.stringify({ ...decodeJwt(a.accessToken), tid: 'ten_other' })).toString('base64url');
    expectError(await api.get('/api/v1/auth/me', { token: `${h}.${payload}.${s}` }), 401, 'UNAUTHORIZED');
  });
});

describe('refresh and logout', () => {
  it('rotates refresh tokens and revokes the whole session when a rotated one is reused', async () => {
    const a = await signUp(api);
    const first = await api.post('/api/v1/auth/refresh', { refreshToken: a.refreshToken });
    expect(first.status).toBe(200);
    const next = first.body.data.refreshToken;
    expect(next).not.toBe(a.refreshToken);
    // Reuse of the rotated token: refused, and the session with it.
    expectError(await api.post('/api/v1/auth/refresh', { refreshToken: a.refreshToken }), 401, 'UNAUTHORIZED');
    expectError(await api.post('/api/v1/auth/refresh', { refreshToken: next }), 401, 'UNAUTHORIZED');
    const start = Date.now();
    let status = 200;
    while (status === 200 && Date.now() - start < 1500) {
      status = (await api.get('/api/v1/auth/me', { token: first.body.data.accessToken })).status;
      if (status === 200) await new Promise((r) => setTimeout(r, 50));
    }
    expect(status).toBe(401);
    expect(Date.now() - start).toBeLessThan(1000);
  });

  it('logout ends the access token, the refresh token and the cookie', async () => {
    const a = await signUp(api);
    const res = await api.post('/api/v1/auth/logout', undefined, { token: a.accessToken });
    expect(res.status).toBe(200);
    expect(res.headers.get('set-cookie')).toMatch(/svc_session=; .*Max-Age=0/);
    const t0 = Date.now();
    let me = await api.get('/api/v1/auth/me', { token: a.accessToken });
    while (me.status === 200 && Date.now() - t0 < 1500) me = await api.get('/api/v1/auth/me', { token: a.accessToken });
    expectError(me, 401, 'UNAUTHORIZED');
    expect(Date.now() - t0).toBeLessThan(1000);
    expectError(await api.get('/api/v1/auth/me', { cookie: a.cookie }), 401, 'UNAUTHORIZED');
    expectError(await api.post('/api/v1/auth/refresh', { refreshToken: a.refreshToken }), 401, 'UNAUTHORIZED');
  });

  it('logout with the cookie clears it and ends the session; logout with an API key is refused', async () => {
    const a = await signUp(api);
    const origin = new URL(stack.url).origin;
    expectError(await api.post('/api/v1/auth/logout', undefined, { cookie: a.cookie }), 403, 'FORBIDDEN');
    const res = await api.post('/api/v1/auth/logout', undefined, { cookie: a.cookie, headers: { origin } });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ loggedOut: true });
    expect(res.headers.get('set-cookie')).toMatch(/^svc_session=; .*Max-Age=0/);
    const t0 = Date.now();
    let me = await api.get('/api/v1/auth/me', { cookie: a.cookie });
    while (me.status === 200 && Date.now() - t0 < 1500) me = await api.get('/api/v1/auth/me', { cookie: a.cookie });
    expectError(me, 401, 'UNAUTHORIZED');
    expect(Date.now() - t0).toBeLessThan(1000);
    // The same session's access token and refresh token end with it.
    expectError(await api.get('/api/v1/auth/me', { token: a.accessToken }), 401, 'UNAUTHORIZED');
    expectError(await api.post('/api/v1/auth/refresh', { refreshToken: a.refreshToken }), 401, 'UNAUTHORIZED');

    const b = await signUp(api);
    const { key } = await createKey(api, b.accessToken);
    expect(expectError(await api.post('/api/v1/auth/logout', undefined, { token: key }), 400, 'VALIDATION_ERROR').details.reason).toBe(
      'not_a_session',
    );
    expect((await api.get('/api/v1/auth/me', { token: key })).status).toBe(200);
    expectError(await api.post('/api/v1/auth/logout'), 401, 'UNAUTHORIZED');
  });

  it('refresh answers a new pair that works, and refuses garbage with 401 and a missing token with 400', async () => {
    const a = await signUp(api);
    const res = await api.post('/api/v1/auth/refresh', { refreshToken: a.refreshToken });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ user: { id: a.userId }, tenant: { id: a.tenantId }, expiresIn: 900 });
    expect((await api.get('/api/v1/auth/me', { token: res.body.data.accessToken })).body.data.user.id).toBe(a.userId);
    expectError(await api.post('/api/v1/auth/refresh', { refreshToken: 'svc_rt_' + 'z'.repeat(43) }), 401, 'UNAUTHORIZED');
    expectError(await api.post('/api/v1/auth/refresh', { refreshToken: a.accessToken.slice(0, 150) }), 401, 'UNAUTHORIZED');
    expectError(await api.post('/api/v1/auth/refresh', {}), 400, 'VALIDATION_ERROR');
  });

  it('refuses a cookie-authenticated write without our Origin (CSRF) and accepts it with', async () => {
    const a = await signUp(api);
    const body = { name: 'm', email: `m${Date.now()}@example.com`, role: 'member', password: 'password123' };
    const bad = await api.post('/api/v1/tenant/team/members', body, { cookie: a.cookie, headers: { origin: 'https://evil.example' } });
    expectError(bad, 403, 'FORBIDDEN');
    expect(bad.body.error.details.reason).toBe('origin_mismatch');
    expectError(await api.post('/api/v1/tenant/team/members', body, { cookie: a.cookie }), 403, 'FORBIDDEN');
    const ok = await api.post('/api/v1/tenant/team/members', body, { cookie: a.cookie, headers: { origin: new URL(stack.url).origin } });
    expect(ok.status).toBe(201);
  });
});
