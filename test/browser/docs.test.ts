/**
 * `/docs`, the API reference, in Debian's chromium: public, rendered by Swagger UI from the gateway (no other origin)
 * under its strict Content-Security-Policy with no violation, and showing every operation of the OpenAPI document
 * (counted against the document), its schemas, an example, the auth schemes, the error codes and the quick starts.
 */
import { ERROR_CODES } from '@svc/kit';
import { launchBrowser, step, type Browser } from '../helpers/browser';
import { startStack, type Stack } from '../helpers/stack';

jest.setTimeout(90_000);

let stack: Stack;
let browser: Browser;
let operations: Array<{ method: string; path: string; operationId: string }>;

beforeAll(async () => {
  stack = await startStack();
  browser = await launchBrowser();
  const doc = (await (await fetch(`${stack.url}/api/v1/openapi.json`)).json()) as {
    paths: Record<string, Record<string, { operationId: string }>>;
  };
  operations = Object.entries(doc.paths).flatMap(([path, methods]) =>
    Object.entries(methods).map(([method, op]) => ({ method: method.toUpperCase(), path, operationId: op.operationId })),
  );
});
afterAll(async () => {
  await browser?.close();
  await stack?.stop();
});

it('serves /docs publicly with a strict CSP: scripts and styles from the gateway only, no inline code, no eval', async () => {
  const res = await fetch(`${stack.url}/docs`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
  const csp = res.headers.get('content-security-policy')!;
  expect(csp.split('; ')).toEqual(
    expect.arrayContaining(["default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"]),
  );
  expect(csp).not.toMatch(/unsafe-|https?:|\*/);
  const html = await res.text();
  expect(html).not.toMatch(/<script(?![^>]*\bsrc=)/); // no inline script
  expect(html).not.toMatch(/\son\w+=/); // no inline handler
  expect(html).not.toMatch(/(src|href)="(https?:)?\/\//); // nothing from another origin
  for (const path of [
    '/docs/assets/swagger-ui-bundle.js',
    '/docs/assets/swagger-ui.css',
    '/docs/assets/docs.js',
    '/docs/assets/docs.css',
  ]) {
    expect(html).toContain(path.replace('/docs/assets/', ''));
    const asset = await fetch(`${stack.url}${path}`, { headers: { 'accept-encoding': 'br, gzip' } });
    expect(asset.status).toBe(200);
    const etag = asset.headers.get('etag')!;
    expect((await fetch(`${stack.url}${path}`, { headers: { 'if-none-match': etag } })).status).toBe(304);
  }
  // The 1.7 MB viewer goes compressed (fetch decodes it: the encoding header tells).
  const bundle = await fetch(`${stack.url}/docs/assets/swagger-ui-bundle.js`, { headers: { 'accept-encoding': 'br' } });
  expect(bundle.headers.get('content-encoding')).toBe('br');
  expect((await bundle.text()).length).toBeGreaterThan(1_000_000);
  expect((await fetch(`${stack.url}/docs/assets/nope.js`)).status).toBe(404);
});

it('shows every operation of the OpenAPI document, with schemas, an example, auth schemes and error codes', async () => {
  const { page, problems } = await browser.newPage();
  await step(page, 'docs', async () => {
    expect(operations.length).toBeGreaterThan(50);
    await page.goto(`${stack.url}/docs`);
    await page.locator('#reference[aria-busy="false"]').waitFor({ timeout: 30_000 });
    await page
      .locator('.opblock')
      .nth(operations.length - 1)
      .waitFor();
    expect(await page.locator('.opblock').count()).toBe(operations.length);
    // Each operation once, by its id, method and path (Swagger UI shows the operationId).
    const shown = await page.locator('.opblock').evaluateAll((blocks) =>
      blocks.map((b) => ({
        method: b.querySelector('.opblock-summary-method')?.textContent?.trim(),
        path: b.querySelector('.opblock-summary-path')?.getAttribute('data-path'),
        operationId: b.querySelector('.opblock-summary-operation-id')?.textContent?.trim(),
      })),
    );
    // The quick starts, linked from the header.
    for (const [name, id] of [
      ['SDK quick start', 'sdk-quick-start'],
      ['CLI quick start', 'cli-quick-start'],
    ]) {
      await page.getByRole('link', { name }).click();
      await page.waitForURL(new RegExp(`/docs#${id}$`));
      await page.getByRole('heading', { name }).waitFor();
      // Scrolled to it, smoothly. A function, not a string: the page's CSP forbids evaluating strings.
      await page.waitForFunction((at) => Math.abs((globalThis as any).document.getElementById(at).getBoundingClientRect().top) < 50, id);
    }

    const key = (o: { method?: string; path?: string | null; operationId?: string }) => `${o.method} ${o.path} ${o.operationId}`;
    expect(shown.map(key).sort()).toEqual(operations.map(key).sort());

    // An operation opens on a click: its request body schema with a generated example, its responses.
    const create = page.locator('.opblock', { has: page.locator('.opblock-summary-operation-id', { hasText: /^createProject$/ }) });
    await create.locator('.opblock-summary-control').click();
    await create.getByText('Example Value').first().waitFor();
    await expect(create.locator('.body-param__example, .highlight-code').first().textContent()).resolves.toContain('"name"');
    await create.locator('.responses-table').first().waitFor();

    // The schemas, including the error envelope with every code.
    await page.locator('section.models').getByText('Error', { exact: true }).first().waitFor();

    // The auth schemes, in the Authorize dialog.
    await page
      .getByRole('button', { name: /Authorize/ })
      .first()
      .click();
    const dialog = page.locator('.dialog-ux .modal-ux');
    await dialog.getByText('bearer (http, Bearer)').waitFor();
    await dialog.getByText('session (apiKey)').waitFor();
    await dialog.getByRole('button', { name: 'Close' }).first().click();

    // The error codes, with their HTTP status, and the quick starts' code.
    const rows = page.locator('table.error-codes tbody tr');
    expect(await rows.count()).toBe(Object.keys(ERROR_CODES).length);
    for (const [code, { http }] of Object.entries(ERROR_CODES))
      await expect(page.locator('table.error-codes tr', { hasText: code }).locator('td').nth(1).textContent()).resolves.toBe(String(http));
    await expect(page.locator('#sdk-quick-start + p + pre').textContent()).resolves.toContain("import { SvcClient } from '@svc/sdk'");
    await expect(page.locator('#cli-quick-start + p + pre').textContent()).resolves.toContain('svc whoami');
  });
  expect(problems).toEqual([]);
});
