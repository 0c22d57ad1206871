/**
 * The console (CONTRACT.md 7) in Debian's chromium: the front door, the one navigation, projects, and the usage page
 * with its Chart.js chart drawn from GET /billing/usage (two models, two keys, through the whole stack with the fake
 * OpenAI provider). Every page runs under the strict Content-Security-Policy with no violation.
 */
import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { CONSOLE_NAV, launchBrowser, signedInPage, step, type Browser } from '../helpers/browser';
import { client, createKey, eventually, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

jest.setTimeout(90_000);

let stack: Stack;
let api: Client;
let browser: Browser;
let openai: FakeProviderServer;
let owner: Account;
const OPENAI_KEY = 'sk-tenant-openai-' + 'c'.repeat(32);

beforeAll(async () => {
  openai = await startFakeOpenAI({ apiKey: OPENAI_KEY });
  stack = await startStack({ env: { EGRESS_ALLOW_PRIVATE: 'true', CHAT_DRAIN_MS: '0', CHAT_LLM_SETTINGS_CACHE_MS: '0' } });
  api = client(stack.url);
  browser = await launchBrowser();
  owner = await signUp(api, 'Console');
});
afterAll(async () => {
  await browser?.close();
  await stack?.stop();
  await openai?.close();
});

it('sends / to the console with a session, else to sign-in, which returns to the console', async () => {
  const front = (cookie?: string) => fetch(`${stack.url}/`, { redirect: 'manual', headers: cookie ? { cookie } : {} });
  const anonymous = await front();
  expect(anonymous.status).toBe(302);
  expect(anonymous.headers.get('location')).toBe('/login?next=%2Fprojects');
  const signedIn = await front(owner.cookie);
  expect(signedIn.status).toBe(302);
  expect(signedIn.headers.get('location')).toBe('/projects');

  const { page, problems } = await browser.newPage();
  await step(page, 'front-door', async () => {
    await page.goto(`${stack.url}/`);
    await page.waitForURL('**/login?next=%2Fprojects');
    await page.getByLabel('Email').fill(owner.email);
    await page.getByLabel('Password').fill(owner.password);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL('**/projects');
    await page.getByRole('heading', { name: 'Projects', level: 1 }).waitFor();
  });
  expect(problems).toEqual([]);
});

it('has one navigation landmark with every console link on every console and settings page', async () => {
  const { page, problems } = await signedInPage(browser, stack.url, owner.cookie);
  for (const path of ['/projects', '/usage', '/settings/security/api-keys', '/settings/security/network', '/settings/billing']) {
    await step(page, `nav-${path}`, async () => {
      await page.goto(`${stack.url}${path}`);
      const nav = page.getByRole('navigation');
      expect(await nav.count()).toBe(1);
      for (const label of CONSOLE_NAV) expect(await nav.getByRole('link', { name: label, exact: true }).count()).toBe(1);
      expect(await nav.locator('[aria-current="page"]').getAttribute('href')).toBe(path);
      await page.getByText(`${owner.email} · `).waitFor();
    });
  }
  expect(problems).toEqual([]);
});

it('creates, renames and deletes a project from /projects', async () => {
  const { page, problems } = await signedInPage(browser, stack.url, owner.cookie);
  await step(page, 'projects', async () => {
    await page.goto(`${stack.url}/projects`);
    await page.getByLabel('Name', { exact: true }).fill('Made in the console');
    await page.getByRole('button', { name: 'Create' }).click();
    await page.getByRole('rowheader', { name: 'Made in the console' }).waitFor();
    const listed = (await api.get('/api/v1/projects', { token: owner.accessToken })).body.data;
    expect(listed.map((p: any) => p.name)).toContain('Made in the console');

    await page.getByRole('button', { name: 'Rename Made in the console' }).click();
    await page.getByLabel('New name for Made in the console').fill('Renamed in the console');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByRole('rowheader', { name: 'Renamed in the console' }).waitFor();

    await page.getByRole('button', { name: 'Delete Renamed in the console' }).click();
    await page.getByRole('button', { name: 'Confirm delete of Renamed in the console' }).click();
    await page.getByText('Deleted Renamed in the console.').waitFor();
    await page.getByRole('rowheader', { name: 'Renamed in the console' }).waitFor({ state: 'detached' });
  });
  const after = (await api.get('/api/v1/projects', { token: owner.accessToken })).body.data;
  expect(after.map((p: any) => p.name)).not.toContain('Renamed in the console');
  expect(problems).toEqual([]);
});

it('lists every project of a tenant with more than 500, and finds one by name', async () => {
  const tenant = await signUp(api, 'Many projects');
  const names = Array.from({ length: 501 }, (_, i) => `bulk-${String(i).padStart(3, '0')}`);
  // A few at a time: the list is read page by page (100 each) by the console, and written here as fast as allowed.
  for (let i = 0; i < names.length; i += 10)
    await Promise.all(names.slice(i, i + 10).map((name) => api.post('/api/v1/projects', { name }, { token: tenant.accessToken })));
  const { page, problems } = await signedInPage(browser, stack.url, tenant.cookie);
  await step(page, 'projects-all-and-search', async () => {
    await page.goto(`${stack.url}/projects`);
    // The last one created is there: no stop at a page or at 500.
    await page.getByRole('rowheader', { name: 'bulk-500' }).waitFor();
    expect(await page.getByRole('table').getByRole('rowheader').count()).toBe(501);
    await page.getByLabel('Search').fill('BULK-42');
    await page.getByRole('rowheader', { name: 'bulk-420' }).waitFor();
    expect((await page.getByRole('table').getByRole('rowheader').allTextContents()).sort()).toEqual(
      names.filter((n) => n.startsWith('bulk-42')),
    );
  });
  expect(problems).toEqual([]);
});

it('draws credits per day by model and shows each key with its usage on /usage', async () => {
  const tenant = await signUp(api, 'Usage page');
  const token = tenant.accessToken;
  const keyA = await createKey(api, token, { name: 'Key A' });
  const keyB = await createKey(api, token, { name: 'Key B', limits: { creditBudget: { credits: 500, period: 'month' } } });
  // Two models, so the chart stacks two series: key A's replies on one, key B's on the other.
  for (const [key, model, n] of [
    [keyA.key, 'gpt-fake-a', 3],
    [keyB.key, 'gpt-fake-b', 2],
  ] as const) {
    const llm = { provider: 'openai', model, baseUrl: openai.url, apiKey: OPENAI_KEY };
    expect((await api.patch('/api/v1/tenant/settings/llm', llm, { token })).status).toBe(200);
    const session = (await api.post('/api/v1/chat/sessions', {}, { token: key })).body.data.id;
    for (let i = 0; i < n; i++) {
      const res = await api.post(`/api/v1/chat/sessions/${session}/messages`, { content: `question ${i}` }, { token: key });
      expect(res.status).toBe(202);
      await eventually(async () => {
        const list = await api.get(`/api/v1/chat/sessions/${session}/messages?limit=100`, { token: key });
        return list.body.data.find((m: any) => m.id === res.body.data.responseMessageId)?.status === 'completed';
      }, 15_000);
    }
  }
  const from = new Date(Date.now() - 86_400_000).toISOString();
  const to = new Date(Date.now() + 86_400_000).toISOString();
  let byKey: any[] = [];
  await eventually(async () => {
    byKey = (await api.get(`/api/v1/billing/usage?from=${from}&to=${to}&granularity=day&groupBy=apiKey`, { token })).body.data;
    return byKey.reduce((n, r) => n + r.calls, 0) === 5;
  }, 10_000);
  const credits = byKey.reduce((n, r) => n + r.credits, 0);
  const ofKey = (id: string) => byKey.filter((r) => r.apiKeyId === id).reduce((n, r) => n + r.credits, 0);

  const { page, problems } = await signedInPage(browser, stack.url, tenant.cookie);
  await step(page, 'usage', async () => {
    await page.goto(`${stack.url}/usage`);
    const chart = page.getByRole('img', { name: `Credits per day by model: ${credits.toLocaleString('en-US')} credits in 30 days` });
    await chart.waitFor();
    // Chart.js arrives beside the data: drawn once it has.
    await page.locator('#app canvas[data-drawn]').waitFor();
    // The chart has marks: pixels in each model's colour (the palette's first two), drawn by Chart.js on the canvas.
    const painted = await chart.evaluate((canvas: any) => {
      const { data } = canvas.getContext('2d')!.getImageData(0, 0, canvas.width, canvas.height);
      const count = (r: number, g: number, b: number) => {
        let n = 0;
        for (let i = 0; i < data.length; i += 4) if (data[i] === r && data[i + 1] === g && data[i + 2] === b && data[i + 3] === 255) n++;
        return n;
      };
      return { first: count(0x00, 0x72, 0xb2), second: count(0xe6, 0x9f, 0x00) };
    });
    expect(painted.first).toBeGreaterThan(20);
    expect(painted.second).toBeGreaterThan(20);

    const row = (name: string) => page.getByRole('row').filter({ has: page.getByRole('rowheader', { name: new RegExp(`^${name} \\(`) }) });
    // The table has its own queries: it may fill after the chart is drawn.
    await page.locator('section[aria-labelledby="keys-title"][aria-busy="false"]').waitFor();
    await expect(row('Key A').getByRole('cell').allTextContents()).resolves.toEqual([
      '3',
      expect.any(String),
      expect.any(String),
      String(ofKey(keyA.id)),
      expect.stringMatching(/^\d+$/), // requests this minute: live, and the minute may have just turned
      String(ofKey(keyA.id)),
    ]);
    const b = await row('Key B').getByRole('cell').allTextContents();
    expect(b[0]).toBe('2');
    expect(b[3]).toBe(String(ofKey(keyB.id)));
    expect(b[5]).toBe(`${ofKey(keyB.id)} of 500 (month)`);
  });
  expect(problems).toEqual([]);
});

it("names every chunk a page runs in its shell's modulepreload links, so none waits for another to arrive", async () => {
  const { page, problems } = await signedInPage(browser, stack.url, owner.cookie);
  for (const [path, drawn] of [
    ['/usage', '#app canvas[data-drawn]'], // its chunk imports Chart.js's on demand
    ['/projects', '#app h1'],
    ['/login', '#app h1'],
  ]) {
    await step(page, `preload-${path}`, async () => {
      const fetched: string[] = [];
      const onRequest = (r: { url(): string }) => {
        const m = /\/assets\/console\/([^/?]+\.js)$/.exec(r.url());
        if (m) fetched.push(m[1]);
      };
      page.on('request', onRequest);
      await page.goto(`${stack.url}${path}`);
      await page.locator(drawn).waitFor();
      page.off('request', onRequest);
      const preloaded = await page.$$eval('link[rel="modulepreload"]', (links) => links.map((l) => l.getAttribute('href')));
      expect(preloaded.length).toBeGreaterThan(0);
      // The entry is the shell's script; every other chunk the page fetched was named up front, and none in vain.
      expect(preloaded.sort()).toEqual([...new Set(fetched.filter((f) => f !== 'main.js'))].map((f) => `/assets/console/${f}`).sort());
    });
  }
  expect(problems).toEqual([]);
});

it('offers Load more on /events only while the API says more follow: none after a last page of exactly 50', async () => {
  const tenant = await signUp(api, 'Fifty events');
  const token = tenant.accessToken;
  const createProjects = async (n: number) => {
    const ids: string[] = [];
    for (let i = 0; i < n; i += 10)
      for (const res of await Promise.all(
        Array.from({ length: Math.min(10, n - i) }, (_, j) => api.post('/api/v1/projects', { name: `p-${i + j}` }, { token })),
      ))
        ids.push(res.body.data.id);
    return ids;
  };
  const count = async (type: string) => (await api.get(`/api/v1/events?type=${type}&limit=100`, { token })).body.data.length;
  // 50 project.created, then a project.deleted: the unfiltered list's first page shows the deletion, the filtered not.
  const [first] = await createProjects(50);
  expect((await api.request('DELETE', `/api/v1/projects/${first}`, { token })).status).toBe(200);
  await eventually(async () => (await count('project.created')) === 50 && (await count('project.deleted')) === 1, 15_000);

  const { page, problems } = await signedInPage(browser, stack.url, tenant.cookie);
  const rows = page.locator('#events tbody tr');
  /** /events filtered to project.created, once the filtered walk's first page is shown (the deletion is gone). */
  const filtered = async () => {
    await page.goto(`${stack.url}/events`);
    await page.getByRole('rowheader', { name: 'project.deleted' }).waitFor();
    await page.getByLabel('Type').selectOption('project.created');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.getByRole('rowheader', { name: 'project.deleted' }).waitFor({ state: 'detached' });
  };
  await step(page, 'events-exactly-50', async () => {
    await filtered();
    expect(await rows.count()).toBe(50);
    expect(await page.getByRole('button', { name: 'Load more' }).count()).toBe(0);
  });

  await createProjects(1);
  await eventually(async () => (await count('project.created')) === 51, 15_000);
  await step(page, 'events-51', async () => {
    await filtered();
    expect(await rows.count()).toBe(50);
    await page.getByRole('button', { name: 'Load more' }).click();
    await page.getByRole('button', { name: 'Load more' }).waitFor({ state: 'detached' });
    expect(await rows.count()).toBe(51);
    expect(new Set(await page.getByRole('rowheader').allTextContents())).toEqual(new Set(['project.created']));
  });
  expect(problems).toEqual([]);
});

it('sends a visitor whose session ended to sign in from the billing portal button and the bucket test', async () => {
  const tenant = await signUp(api, 'Session ends');
  for (const [path, button] of [
    ['/settings/billing', 'Open the billing portal'],
    ['/settings/regions', 'Test connection'],
  ]) {
    const { page, context, problems } = await signedInPage(browser, stack.url, tenant.cookie);
    await step(page, `401-${path}`, async () => {
      await page.goto(`${stack.url}${path}`);
      await page.getByRole('button', { name: button }).waitFor();
      // The session is gone (as after a sign-out elsewhere): the next call is a 401.
      await context.clearCookies();
      await page.getByRole('button', { name: button }).click();
      await page.waitForURL(`**/login?next=${encodeURIComponent(path)}`);
    });
    expect(problems).toEqual([]);
  }
});

it('serves the console bundle compressed, its content-hashed chunks immutable', async () => {
  const entry = await fetch(`${stack.url}/assets/console/main.js`, { headers: { 'accept-encoding': 'br' } });
  expect(entry.status).toBe(200);
  expect(entry.headers.get('content-encoding')).toBe('br');
  expect(entry.headers.get('cache-control')).toBe('no-cache');
  const text = await entry.text(); // fetch decodes brotli
  const chunk = /chunk-[A-Z0-9]+\.js/.exec(text)?.[0];
  expect(chunk).toBeDefined();
  const got = await fetch(`${stack.url}/assets/console/${chunk}`, { headers: { 'accept-encoding': 'gzip' } });
  expect(got.headers.get('content-encoding')).toBe('gzip');
  expect(got.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
  const plain = await fetch(`${stack.url}/assets/console/${chunk}`, { headers: { 'accept-encoding': 'identity' } });
  expect(plain.headers.get('content-encoding')).toBeNull();
  expect(await plain.text()).toBe(await got.text());
  expect((await fetch(`${stack.url}/assets/console/nope.js`)).status).toBe(404);
});
