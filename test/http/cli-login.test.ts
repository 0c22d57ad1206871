import { createHash, randomBytes } from 'node:crypto';
import { client, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// The CLI login flow over HTTP, as the terminal and the browser run it (spec 3, CONTRACT.md 4).
let stack: Stack;
let api: Client;
let user: Account;

beforeAll(async () => {
  stack = await startStack();
  api = client(stack.url);
  user = await signUp(api, 'Terminal');
});
afterAll(() => stack.stop());

/** What `svc login` does first: a state, a PKCE verifier and its S256 challenge. */
async function start() {
  const state = randomBytes(32).toString('hex');
  const verifier = randomBytes(32).toString('base64url');
  const codeChallenge = createHash('sha256').update(verifier).digest('base64url');
  const res = await api.post('/api/v1/cli/auth/start', {
    state,
    codeChallenge,
    codeChallengeMethod: 'S256',
    cliVersion: '1.2.3',
    platform: 'linux-x64',
  });
  expect(res.status).toBe(201);
  return { state, verifier, ...res.body.data };
}
const status = async (loginId: string) => (await api.get(`/api/v1/cli/auth/status?loginId=${loginId}`)).body.data.status;
const approve = (loginId: string, state: string, token = user.accessToken) =>
  api.post('/api/v1/cli/auth/complete', { loginId, state }, { token });
const exchange = (loginId: string, codeVerifier: string) => api.post('/api/v1/cli/auth/token', { loginId, codeVerifier });

it('starts, is approved in the browser, and is exchanged once for a CLI token of that user', async () => {
  const login = await start();
  expect(login.verificationCode).toMatch(/^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/);
  expect(login.loginId.length).toBeGreaterThanOrEqual(22);
  const authUrl = new URL(login.authUrl);
  expect(authUrl.origin + authUrl.pathname).toBe(`${stack.url}/cli/login`);
  expect(Object.fromEntries(authUrl.searchParams)).toEqual({ loginId: login.loginId, state: login.state });
  expect(login.interval).toBeGreaterThan(0);
  expect(Date.parse(login.expiresAt) - Date.now()).toBeGreaterThan(9 * 60_000);
  // The approval page shows what the terminal printed.
  const info = (await api.get(`/api/v1/cli/auth/info?loginId=${login.loginId}`)).body.data;
  expect(info).toEqual({
    verificationCode: login.verificationCode,
    cliVersion: '1.2.3',
    platform: 'linux-x64',
    status: 'pending',
    expiresAt: login.expiresAt,
  });
  expect(expectError(await exchange(login.loginId, login.verifier), 400, 'VALIDATION_ERROR').details.reason).toBe('authorization_pending');
  expect((await approve(login.loginId, login.state)).body.data).toEqual({ status: 'approved' });
  expect(await status(login.loginId)).toBe('approved');

  const done = await exchange(login.loginId, login.verifier);
  expect(done.status).toBe(200);
  expect(done.body.data).toMatchObject({ user: { email: user.email }, tenant: { name: 'Terminal' } });
  expect(done.headers.get('cache-control')).toBe('no-store');
  expect(await status(login.loginId)).toBe('consumed');
  const token = done.body.data.token;
  const me = (await api.get('/api/v1/auth/me', { token })).body.data;
  expect(me.credential.type).toBe('cli');
  // A CLI login is a person's session: it may manage API keys (decision 22).
  expect((await api.post('/api/v1/api-keys', { name: 'from the cli', type: 'cli', environment: 'development' }, { token })).status).toBe(
    201,
  );
  // Once only.
  expectError(await exchange(login.loginId, login.verifier), 409, 'CONFLICT');
  // Logout revokes the CLI token.
  expect((await api.post('/api/v1/auth/logout', undefined, { token })).status).toBe(200);
  let after = await api.get('/api/v1/auth/me', { token });
  for (let i = 0; after.status === 200 && i < 30; i++) {
    await new Promise((r) => setTimeout(r, 50));
    after = await api.get('/api/v1/auth/me', { token });
  }
  expectError(after, 401, 'UNAUTHORIZED');
});

it('checks the state first, then that the login is pending', async () => {
  const login = await start();
  expect(expectError(await approve(login.loginId, 'f'.repeat(64)), 400, 'VALIDATION_ERROR').details.reason).toBe('invalid_state');
  expect(await status(login.loginId)).toBe('pending');
  await approve(login.loginId, login.state);
  expectError(await approve(login.loginId, 'f'.repeat(64)), 400, 'VALIDATION_ERROR');
  expectError(await approve(login.loginId, login.state), 409, 'CONFLICT');
});

it('refuses a wrong code verifier and keeps the login for the right one', async () => {
  const login = await start();
  await approve(login.loginId, login.state);
  const wrong = randomBytes(32).toString('base64url');
  expect(expectError(await exchange(login.loginId, wrong), 400, 'VALIDATION_ERROR').details.reason).toBe('invalid_code_verifier');
  expect((await exchange(login.loginId, login.verifier)).status).toBe(200);
});

it('lets exactly one of three concurrent token requests win', async () => {
  const login = await start();
  await approve(login.loginId, login.state);
  const answers = await Promise.all([1, 2, 3].map(() => exchange(login.loginId, login.verifier)));
  expect(answers.map((a) => a.status).sort()).toEqual([200, 409, 409]);
});

it('ends a denied login at once: expired, and the terminal is told', async () => {
  const login = await start();
  expect(
    (await api.post('/api/v1/cli/auth/deny', { loginId: login.loginId, state: login.state }, { token: user.accessToken })).body.data,
  ).toEqual({
    status: 'expired',
  });
  expect(await status(login.loginId)).toBe('expired');
  expectError(await exchange(login.loginId, login.verifier), 409, 'CONFLICT');
  expectError(await approve(login.loginId, login.state), 409, 'CONFLICT');
});

it('validates the start request, needs a signed-in user to approve, and 404s unknown logins', async () => {
  const base = { state: 'a'.repeat(64), codeChallenge: 'b'.repeat(43), codeChallengeMethod: 'S256', cliVersion: '1', platform: 'p' };
  expectError(await api.post('/api/v1/cli/auth/start', { ...base, codeChallengeMethod: 'plain' }), 400, 'VALIDATION_ERROR');
  expectError(await api.post('/api/v1/cli/auth/start', { ...base, state: 'short' }), 400, 'VALIDATION_ERROR');
  const login = await start();
  expectError(await api.post('/api/v1/cli/auth/complete', { loginId: login.loginId, state: login.state }), 401, 'UNAUTHORIZED');
  expectError(await api.get('/api/v1/cli/auth/status?loginId=cli_nothing0000000000000000'), 404, 'RESOURCE_NOT_FOUND');
  expect((await api.get(`/api/v1/cli/auth/status?loginId=${login.loginId}`)).headers.get('x-ratelimit-limit')).toBeNull();
});
