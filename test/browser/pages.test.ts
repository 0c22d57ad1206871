import { launchBrowser, step, type Browser } from '../helpers/browser';
import { cliHome, startCli, svc } from '../helpers/cli';
import { client, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// The web pages in Debian's chromium: sign up and sign in, the CLI approval (a visitor who is not signed in signs in
// and comes back), API keys (created, shown once, used, revoked, refused), the network allowlist and the sandbox
// billing portal. Every page runs under the strict Content-Security-Policy with no violation.
jest.setTimeout(90_000);

let stack: Stack;
let api: Client;
let browser: Browser;
let owner: Account;

beforeAll(async () => {
  stack = await startStack();
  api = client(stack.url);
  browser = await launchBrowser();
  owner = await signUp(api, 'Browser');
});
afterAll(async () => {
  await browser.close();
  await stack.stop();
});

it('serves the pages with a strict CSP, no inline code and no other origin', async () => {
  for (const path of [
    '/login',
    '/login?signup=1',
    '/cli/login',
    '/oauth/acme/callback',
    '/settings/security/api-keys',
    '/settings/security/network',
    '/settings/billing',
  ]) {
    const res = await api.get(path);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
    const csp = res.headers.get('content-security-policy')!;
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).not.toContain('unsafe-inline');
    expect(res.text).not.toMatch(/<script(?![^>]*\bsrc=)/); // no inline script
    expect(res.text).not.toMatch(/\son\w+=/); // no inline handlers
    expect(res.text).not.toMatch(/https?:\/\//); // no external asset
    // Every page, sign-in and the CLI approval included, is drawn by the console's one script.
    expect(res.text).toContain('<script type="module" src="/assets/console/main.js"></script>');
  }
  expect((await api.get('/login?signup=1')).text).toContain('<title>Create an account · svc</title>');
  expect((await api.get('/login')).text).toContain('<title>Sign in · svc</title>');
  const css = await api.get('/assets/app.css');
  expect(css.headers.get('content-type')).toBe('text/css; charset=utf-8');
  const etag = css.headers.get('etag')!;
  expect((await api.get('/assets/app.css', { headers: { 'if-none-match': etag } })).status).toBe(304);
  // The old hand-written page script is gone.
  expect((await api.get('/assets/app.js')).status).toBe(404);
});

it('signs up, then signs in with the labelled form, and signs out', async () => {
  const { page, problems } = await browser.newPage();
  const email = `pages-${Date.now()}@example.com`;
  await step(page, 'sign-up', async () => {
    await page.goto(`${stack.url}/login`);
    // The form's first field has the focus: typing starts at once.
    expect(await page.getByLabel('Email').evaluate((el) => el === (globalThis as any).document.activeElement)).toBe(true);
    await page.getByRole('link', { name: 'Create an account' }).click();
    await page.waitForURL('**/login?signup=1&next=%2Fprojects');
    // The sign-up form's first field gets the focus once it has rendered (the URL changes before that): typing
    // before it would go elsewhere. A form that never focuses it fails here.
    const name = await page.getByLabel('Name').elementHandle();
    await page.waitForFunction((el) => el === (globalThis as any).document.activeElement, name, { timeout: 5000 });
    await page.keyboard.type('Page User');
    expect(await page.getByLabel('Name').inputValue()).toBe('Page User');
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill('correct horse battery staple');
    await page.getByLabel('Organization').fill('Pages Inc');
    await page.getByRole('button', { name: 'Create account' }).click();
    // With no page asked for, signing up lands in the console.
    await page.waitForURL('**/projects');
    await page.getByText(`${email} · Pages Inc`).waitFor();

    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL('**/login');
    // Signed out: a settings page sends the visitor to sign in.
    await page.goto(`${stack.url}/settings/security/network`);
    await page.waitForURL(/\/login\?next=%2Fsettings%2Fsecurity%2Fnetwork$/);

    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill('wrong password here');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page
      .getByRole('alert')
      .filter({ hasText: /request id/ })
      .waitFor();
    await page.getByLabel('Password').fill('correct horse battery staple');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL('**/settings/security/network');
  });
  expect(problems).toEqual([]);
});

it('runs the real svc login: the visitor signs in, comes back to the same approval, sees the code, approves', async () => {
  const home = cliHome();
  const cli = startCli(['login'], { XDG_CONFIG_HOME: home, SVC_BASE_URL: stack.url });
  const [, authUrl] = await cli.waitFor(/^\s+(http\S+\/cli\/login\?\S+)$/m);
  const [, code] = await cli.waitFor(/Verification code: ([A-Z]{4}-[A-Z]{4})/);
  const loginId = new URL(authUrl).searchParams.get('loginId');
  const { page, problems } = await browser.newPage();
  await step(page, 'cli-approve', async () => {
    await page.goto(authUrl);
    await page.waitForURL(/\/login\?next=/);
    await page.getByLabel('Email').fill(owner.email);
    await page.getByLabel('Password').fill(owner.password);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL((url) => url.pathname === '/cli/login' && url.searchParams.get('loginId') === loginId);
    // The same code as the terminal, the CLI's version and platform.
    await page.getByLabel('Verification code').filter({ hasText: code }).waitFor();
    await page.getByText(`${process.platform}-${process.arch}`).waitFor();
    await page.getByRole('button', { name: 'Approve' }).click();
    await page.getByRole('heading', { name: 'CLI login approved' }).waitFor();
    await page.getByText(/return to your terminal/).waitFor();
  });
  const done = await cli.done;
  expect(done.code).toBe(0);
  expect(done.stdout).toContain(`Signed in as ${owner.email} (tenant `);
  const who = await svc(['whoami', '--json'], { XDG_CONFIG_HOME: home, SVC_BASE_URL: stack.url });
  expect(JSON.parse(who.stdout)).toMatchObject({ user: { email: owner.email }, credential: { type: 'cli' } });
  expect(problems).toEqual([]);
});

it('denies a second svc login from the page: the CLI stops with a clear message', async () => {
  const cli = startCli(['login'], { XDG_CONFIG_HOME: cliHome(), SVC_BASE_URL: stack.url });
  const [, authUrl] = await cli.waitFor(/^\s+(http\S+\/cli\/login\?\S+)$/m);
  const { page, context } = await browser.newPage();
  await context.addCookies([{ name: 'svc_session', value: owner.cookie.split('=').slice(1).join('='), url: stack.url }]);
  await step(page, 'cli-deny', async () => {
    await page.goto(authUrl);
    await page.getByRole('button', { name: 'Deny' }).click();
    const said = page.getByRole('heading', { name: 'CLI login denied' });
    await said.waitFor();
    // What happened takes the focus, so a screen reader reads it out.
    expect(await said.evaluate((el) => el === (globalThis as any).document.activeElement)).toBe(true);
    // The same address again: the request no longer waits, and the page says so instead of offering Approve.
    await page.reload();
    await page.getByRole('heading', { name: 'This login request is no longer waiting' }).waitFor();
    expect(await page.getByRole('button', { name: 'Approve' }).count()).toBe(0);
    // An address without its state is incomplete.
    await page.goto(`${stack.url}/cli/login?loginId=x`);
    await page.getByRole('heading', { name: 'This link is incomplete' }).waitFor();
  });
  const done = await cli.done;
  expect(done.code).toBe(1);
  expect(done.stderr).toContain('The login was denied in the browser or expired');
});

it('creates an API key shown once, which works until it is revoked from the page', async () => {
  const { page, context, problems } = await browser.newPage();
  await context.addCookies([{ name: 'svc_session', value: owner.cookie.split('=').slice(1).join('='), url: stack.url }]);
  let key = '';
  await step(page, 'api-keys', async () => {
    await page.goto(`${stack.url}/settings/security/api-keys`);
    await page.getByLabel('Name').fill('from the browser');
    await page.getByLabel('Type').selectOption('ci');
    await page.getByLabel('Environment').selectOption('staging');
    await page.getByLabel('projects:read').check();
    await page.getByRole('button', { name: 'Create key' }).click();
    const shown = page.getByLabel('Key', { exact: true });
    await expectValue(shown, /^svc_ci_/);
    key = await shown.inputValue();
    await page.getByRole('button', { name: 'Copy' }).click();
    await page.getByText('Copied').waitFor();
    await page.getByRole('cell', { name: 'from the browser', exact: true }).waitFor();
  });
  // The key works, within its scope.
  expect((await api.get('/api/v1/projects', { token: key })).status).toBe(200);
  expectError(await api.post('/api/v1/projects', { name: 'x' }, { token: key }), 403, 'FORBIDDEN');
  await step(page, 'api-keys-revoke', async () => {
    // Shown once: after a reload the page holds only its first characters.
    await page.reload();
    await page.getByRole('cell', { name: 'from the browser', exact: true }).waitFor();
    expect(await page.content()).not.toContain(key);
    await page.getByRole('button', { name: 'Revoke from the browser' }).click();
    await page.getByText('Key from the browser revoked').waitFor();
  });
  await eventually(async () => (await api.get('/api/v1/projects', { token: key })).status === 401, 3000);
  expect(problems).toEqual([]);
});

it('sets and clears the network allowlist; an API key from outside it is refused', async () => {
  const { key } = await (async () => {
    const res = await api.post('/api/v1/api-keys', { name: 'net', type: 'sdk', environment: 'development' }, { token: owner.accessToken });
    return { key: res.body.data.key as string };
  })();
  const { page, context, problems } = await browser.newPage();
  await context.addCookies([{ name: 'svc_session', value: owner.cookie.split('=').slice(1).join('='), url: stack.url }]);
  await step(page, 'network', async () => {
    await page.goto(`${stack.url}/settings/security/network`);
    const area = page.getByLabel(/Allowed addresses/);
    await area.fill('203.0.113.0/24\n2001:db8::/32');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByText(/only from 2 address/).waitFor();
  });
  await eventually(async () => (await api.get('/api/v1/projects', { token: key })).status === 403, 3000);
  expect((await api.get('/api/v1/projects', { token: key })).body.error.details.reason).toBe('ip_not_allowed');
  await step(page, 'network-invalid', async () => {
    await page.getByLabel(/Allowed addresses/).fill('not-an-address');
    await page.getByRole('button', { name: 'Save' }).click();
    await page
      .getByRole('alert')
      .filter({ hasText: /request id/ })
      .waitFor();
    await page.getByLabel(/Allowed addresses/).fill('');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByText('Saved: API keys work from any address.').waitFor();
  });
  await eventually(async () => (await api.get('/api/v1/projects', { token: key })).status === 200, 3000);
  expect(problems).toEqual([]);
});

it('buys credits in the sandbox billing portal and shows the invoice', async () => {
  const a = await signUp(api, 'Portal');
  await eventually(async () => (await api.get('/api/v1/billing/summary', { token: a.accessToken })).body.data.credits.balance === 1000);
  const { page, context, problems } = await browser.newPage();
  await context.addCookies([{ name: 'svc_session', value: a.cookie.split('=').slice(1).join('='), url: stack.url }]);
  await step(page, 'billing', async () => {
    await page.goto(`${stack.url}/settings/billing`);
    await page.getByText('1,000', { exact: true }).waitFor();
    await page.getByLabel('Credits', { exact: true }).fill('250');
    await page.getByRole('button', { name: 'Buy credits' }).click();
    await page.getByText(/Bought 250 credits \(sandbox: settled at once/).waitFor();
    await page.getByText('1,250', { exact: true }).waitFor();
    await page.getByRole('cell', { name: '250 credits' }).waitFor();
    await page.getByRole('button', { name: 'Open the billing portal' }).click();
    await page.getByText('The sandbox provider has no portal of its own: this page is its portal.').waitFor();
  });
  expect((await api.get('/api/v1/billing/summary', { token: a.accessToken })).body.data.credits.balance).toBe(1250);
  expect(problems).toEqual([]);
});

async function expectValue(locator: import('playwright-core').Locator, pattern: RegExp): Promise<void> {
  await locator.waitFor();
  await eventually(async () => pattern.test(await locator.inputValue()), 5000);
}
