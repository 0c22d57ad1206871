import { launchBrowser, step } from '../helpers/browser';
import { startOidcPeer, type OidcClient, type OidcPeer } from '../helpers/oidc';
import { client, expectError, signUp, type Client } from '../helpers/http';
import { outboxToken } from '../helpers/smtp';
import { startStack, type Stack } from '../helpers/stack';

// External sign-in against a real local OpenID provider (oidc-provider from npm, its own process): POST
// /auth/exchange with its ID tokens, and the OAuth authorization-code flow with state, PKCE and nonce; an invitation
// accepted by signing in with the provider, in chromium.
jest.setTimeout(60_000);

const PUBLIC_URL = 'http://app.example.test';
const CALLBACK = `${PUBLIC_URL}/oauth/acme/callback`;
const spa: OidcClient = {
  client_id: 'svc-spa',
  client_secret: 'spa-secret-0123456789abcdef',
  redirect_uris: ['http://127.0.0.1:9/spa/callback'],
  grant_types: ['authorization_code'],
  response_types: ['code'],
};
const web: OidcClient = { ...spa, client_id: 'svc-web', client_secret: 'web-secret-0123456789abcdef', redirect_uris: [CALLBACK] };

let peer: OidcPeer;
let stack: Stack;
let api: Client;

beforeAll(async () => {
  peer = await startOidcPeer([spa, web], {
    alice: { email: 'alice@idp.example', email_verified: true, name: 'Alice Idp' },
    bob: { email: 'bob@idp.example', email_verified: true, name: 'Bob Idp' },
    mallory: { email: 'mallory@idp.example', email_verified: false, name: 'Mallory' },
    crowd: { email: 'crowd@idp.example', email_verified: true, name: 'Crowd' },
    existing: { email: 'existing-user@idp.example', email_verified: true, name: 'Existing' },
    carol: { email: 'carol@idp.example', email_verified: true, name: 'Carol Idp' },
  });
  stack = await startStack({
    env: {
      PUBLIC_URL,
      OIDC_ISSUER: peer.issuer,
      OIDC_AUDIENCE: spa.client_id,
      OAUTH_PROVIDERS: JSON.stringify({ acme: { issuer: peer.issuer, clientId: web.client_id, clientSecret: web.client_secret } }),
    },
  });
  api = client(stack.url);
});
afterAll(async () => {
  await stack.stop();
  await peer.stop();
});

const exchange = (token: string) => api.post('/api/v1/auth/exchange', { token });
const meWith = async (token: string) => (await api.get('/api/v1/auth/me', { token })).body.data;

it('exchanges an ID token of the provider for an access token; the first one creates the tenant, later ones sign in', async () => {
  const res = await exchange(await peer.idToken(spa, 'alice'));
  expect(res.status).toBe(200);
  expect(res.body.data).toEqual({ accessToken: expect.any(String), expiresIn: 900, tokenType: 'Bearer' });
  expect(res.headers.get('set-cookie')).toMatch(/^svc_session=svc_sess_/);
  const me = await meWith(res.body.data.accessToken);
  expect(me).toMatchObject({ user: { email: 'alice@idp.example', name: 'Alice Idp' }, role: 'owner', credential: { type: 'user' } });

  const again = await meWith((await exchange(await peer.idToken(spa, 'alice'))).body.data.accessToken);
  expect(again.user.id).toBe(me.user.id);
  expect(again.tenant.id).toBe(me.tenant.id);
});

it('signs in the existing user who has the verified email', async () => {
  const reg = await api.post('/api/v1/auth/register', {
    email: 'existing-user@idp.example',
    password: 'correct horse battery',
    name: 'Existing',
    tenantName: 'Existing Co',
  });
  const me = await meWith((await exchange(await peer.idToken(spa, 'existing'))).body.data.accessToken);
  expect(me.user.id).toBe(reg.body.data.user.id);
  expect(me.tenant.name).toBe('Existing Co');
});

it('makes one tenant of concurrent first sign-ins of a new email', async () => {
  const tokens = await Promise.all(Array.from({ length: 5 }, () => peer.idToken(spa, 'crowd')));
  const answers = await Promise.all(tokens.map(exchange));
  expect(answers.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
  const users = await Promise.all(answers.map(async (r) => (await meWith(r.body.data.accessToken)).user.id));
  expect(new Set(users).size).toBe(1);
});

it('refuses an unverified email, a token for another audience, a forged token and garbage with 401', async () => {
  expect(expectError(await exchange(await peer.idToken(spa, 'mallory')), 401, 'UNAUTHORIZED').details).toMatchObject({
    reason: 'email_not_verified',
  });
  expectError(await exchange(await peer.idToken(web, 'alice')), 401, 'UNAUTHORIZED'); // aud is svc-web
  const good = await peer.idToken(spa, 'alice');
  const [h, p] = good.split('.');
  const claims = JSON.parse(Buffer.from(p, 'base64url').toString());
  const forged = `${h}.${Buffer.from(JSON.stringify({ ...claims, email: 'bob@idp.example' })).toString('base64url')}.${good.split('.')[2]}`;
  expectError(await exchange(forged), 401, 'UNAUTHORIZED');
  expectError(await exchange('not-a-jwt'), 401, 'UNAUTHORIZED');
  expectError(await api.post('/api/v1/auth/exchange', {}), 400, 'VALIDATION_ERROR');
  // A platform token is not an external one.
  const own = await signUp(api, 'Own');
  expectError(await exchange(own.accessToken), 401, 'UNAUTHORIZED');
});

it('signs in through the OAuth flow: state, PKCE S256 and nonce; a code and a state work once', async () => {
  const start = await api.get('/api/v1/oauth/acme/start');
  expect(start.status).toBe(200);
  const url = new URL(start.body.data.url);
  expect(url.origin + url.pathname).toBe(`${peer.issuer}/auth`);
  expect(Object.fromEntries(url.searchParams)).toMatchObject({
    response_type: 'code',
    client_id: 'svc-web',
    redirect_uri: CALLBACK,
    code_challenge_method: 'S256',
    scope: 'openid email profile',
  });
  for (const p of ['state', 'nonce', 'code_challenge']) expect(url.searchParams.get(p)!.length).toBeGreaterThanOrEqual(20);

  await peer.loginAs('bob');
  const back = await peer.authorize(url.toString(), CALLBACK);
  const code = back.searchParams.get('code')!;
  const state = back.searchParams.get('state')!;
  expect(state).toBe(url.searchParams.get('state'));

  // A state that is not ours (tampered) is refused before the code is spent.
  const tampered = await api.post('/api/v1/oauth/acme/authorize', { code, state: state.slice(0, -4) + 'AAAA' });
  expect(expectError(tampered, 400, 'VALIDATION_ERROR').details.reason).toBe('invalid_state');
  expectError(await api.post('/api/v1/oauth/other/authorize', { code, state }), 404, 'RESOURCE_NOT_FOUND');

  const done = await api.post('/api/v1/oauth/acme/authorize', { code, state });
  expect(done.status).toBe(200);
  expect(done.body.data.user).toMatchObject({ email: 'bob@idp.example' });
  expect(done.headers.get('set-cookie')).toMatch(/^svc_session=/);
  expect((await meWith(done.body.data.accessToken)).user.email).toBe('bob@idp.example');

  // The same code and state again: refused (the provider spent the code; the state is used).
  const replay = await api.post('/api/v1/oauth/acme/authorize', { code, state });
  expect(replay.status).toBe(400);
  expectError(await api.get('/api/v1/oauth/nope/start'), 404, 'RESOURCE_NOT_FOUND');
});

it('completes the sign-in on the callback page in a browser, which then shows the signed-in user', async () => {
  const url = (await api.get('/api/v1/oauth/acme/start')).body.data.url as string;
  await peer.loginAs('alice');
  const back = await peer.authorize(url, CALLBACK);
  const browser = await launchBrowser();
  try {
    const { page, problems } = await browser.newPage();
    await step(page, 'oauth-callback', async () => {
      // The provider sent the browser to PUBLIC_URL's callback; here that address is the stack's.
      await page.goto(`${stack.url}/oauth/acme/callback${back.search}`);
      // Signed in, the callback page goes to the console.
      await page.waitForURL('**/projects');
      await page.getByText('alice@idp.example · Alice Idp').waitFor();
    });
    await step(page, 'oauth-callback-refused', async () => {
      // The provider refused (or the visitor cancelled): the page says why, and offers the way back.
      await page.goto(`${stack.url}/oauth/acme/callback?error=access_denied&error_description=The+user+said+no`);
      await page.getByRole('alert').filter({ hasText: 'The identity provider said: The user said no' }).waitFor();
      // The same code and state again: the API refuses it (its request id shown), and nobody is sent on.
      await page.goto(`${stack.url}/oauth/acme/callback${back.search}`);
      await page
        .getByRole('alert')
        .filter({ hasText: /request id/ })
        .waitFor();
      expect(new URL(page.url()).pathname).toBe('/oauth/acme/callback');
      await page.getByRole('link', { name: 'Back to sign in' }).click();
      await page.waitForURL('**/login');
    });
    expect(problems).toEqual([]);
  } finally {
    await browser.close();
  }
});

it('accepts an invitation by signing in with the provider in chromium; another address, or the link again, is refused', async () => {
  expect((await api.get('/api/v1/oauth/providers')).body.data).toEqual({ providers: ['acme'] });
  const owner = await signUp(api, 'Inviter');
  const invite = async (email: string) => {
    const res = await api.post('/api/v1/tenant/team/invitations', { email, role: 'admin' }, { token: owner.accessToken });
    expect(res.status).toBe(201);
    return { id: res.body.data.id as string, token: await outboxToken(stack.dataDir, email, '/invitations') };
  };
  const carol = await invite('carol@idp.example');
  const browser = await launchBrowser();
  try {
    const { page, problems } = await browser.newPage();
    await peer.loginAs('carol');
    await step(page, 'invitation-oidc', async () => {
      await page.goto(`${stack.url}/invitations/${carol.token}`);
      // Through the provider in this browser, which it sends back to PUBLIC_URL's callback (not resolvable here):
      // that address is the stack's, opened by hand with what the provider put in it.
      const sentBack = page.waitForRequest((r) => r.url().startsWith(CALLBACK));
      // The browser's own try at that address ends on its error page: that navigation must be over before ours, or it
      // cuts ours short.
      const failed = page.waitForEvent('requestfailed', (r) => r.url().startsWith(CALLBACK));
      await page.getByRole('button', { name: 'Join with acme' }).click();
      const back = new URL((await sentBack).url());
      await failed;
      await page.waitForURL((u) => u.protocol === 'chrome-error:', { timeout: 5_000 }).catch(() => undefined);
      await page.goto(`${stack.url}${back.pathname}${back.search}`);
      await page.waitForURL('**/projects');
      await page.getByText('carol@idp.example · Inviter').waitFor();
    });
    expect(problems).toEqual([]);
  } finally {
    await browser.close();
  }
  const members = (await api.get('/api/v1/tenant/team/members', { token: owner.accessToken })).body.data;
  expect(members.find((m: { email: string }) => m.email === 'carol@idp.example')).toMatchObject({ name: 'Carol Idp', role: 'admin' });
  const invitations = (await api.get('/api/v1/tenant/team/invitations', { token: owner.accessToken })).body.data;
  expect(invitations.find((i: { id: string }) => i.id === carol.id).status).toBe('accepted');
  // The link again: refused before the visitor is sent to the provider.
  const again = await api.get(`/api/v1/oauth/acme/start?invitation=${carol.token}`);
  expect(expectError(again, 410, 'GONE').details.reason).toBe('invitation_not_valid');

  // The provider vouches for another address than the invited one: refused, and the invitation still waits.
  const erin = await invite(`erin-${Date.now()}@example.com`);
  const start = (await api.get(`/api/v1/oauth/acme/start?invitation=${erin.token}`)).body.data.url as string;
  await peer.loginAs('bob');
  const back = await peer.authorize(start, CALLBACK);
  const done = await api.post('/api/v1/oauth/acme/authorize', {
    code: back.searchParams.get('code'),
    state: back.searchParams.get('state'),
  });
  expect(expectError(done, 403, 'FORBIDDEN').details.reason).toBe('invitation_email_mismatch');
  const left = (await api.get('/api/v1/tenant/team/invitations', { token: owner.accessToken })).body.data;
  expect(left.find((i: { id: string }) => i.id === erin.id).status).toBe('pending');
  expectError(await api.get('/api/v1/oauth/acme/start?invitation=short'), 400, 'VALIDATION_ERROR');
});
