/**
 * `/docs`, the API reference, in Debian's chromium: public, rendered by Swagger UI from the gateway (no other origin)
 * under its strict Content-Security-Policy with no violation, and showing every operation of the OpenAPI document
 * (counted against the document), its schemas, an example, the auth schemes, the error codes and the quick starts.
 */
import { readFileSync } from 'node:fs';
import { get, type IncomingHttpHeaders } from 'node:http';
import { join, resolve } from 'node:path';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import { ERROR_CODES } from '@svc/kit';
import type { Page } from 'playwright-core';
import { launchBrowser, step, type Browser } from '../helpers/browser';
import { startStack, type Stack } from '../helpers/stack';

jest.setTimeout(90_000);

const AXE = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

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
  for (const name of ['swagger-ui-bundle.js', 'swagger-ui.css', 'docs.js', 'docs.css']) {
    const path = `/assets/docs/${name}`;
    expect(html).toContain(`"${path}"`);
    const asset = await fetch(`${stack.url}${path}`, { headers: { 'accept-encoding': 'br, gzip' } });
    expect(asset.status).toBe(200);
    expect(asset.headers.get('content-type')).toBe(name.endsWith('.js') ? 'text/javascript; charset=utf-8' : 'text/css; charset=utf-8');
    expect(asset.headers.get('cache-control')).toBe('no-cache');
    expect(asset.headers.get('vary')).toBe('accept-encoding');
    const etag = asset.headers.get('etag')!;
    expect((await fetch(`${stack.url}${path}`, { headers: { 'if-none-match': etag } })).status).toBe(304);
  }
  expect((await fetch(`${stack.url}/assets/docs/nope.js`)).status).toBe(404);
});

/** The bytes on the wire, undecoded (fetch would decode them). */
/** Opens the Authorize dialog (from the first Authorize button) once it lists the bearer scheme. */
async function openAuthorize(page: Page) {
  await page
    .getByRole('button', { name: /Authorize/ })
    .first()
    .click();
  const dialog = page.locator('.dialog-ux .modal-ux');
  await dialog.getByText('bearer (http, Bearer)').waitFor();
  return dialog;
}

function rawGet(url: string, headers: Record<string, string>): Promise<{ headers: IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    get(url, { headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    }).on('error', reject);
  });
}

it("serves the viewer's files compressed at build time: the pre-built brotli and gzip bytes, no work per request", async () => {
  const built = resolve(__dirname, '../../gateway/public/docs');
  const plain = readFileSync(join(built, 'swagger-ui-bundle.js'));
  expect(plain.length).toBeGreaterThan(1_000_000);
  for (const [accept, encoding, file] of [
    ['br', 'br', 'swagger-ui-bundle.js.br'],
    ['gzip, deflate, br', 'br', 'swagger-ui-bundle.js.br'],
    ['gzip', 'gzip', 'swagger-ui-bundle.js.gz'],
  ]) {
    // Byte for byte what the build wrote (quality 11, which no server would spend per request).
    const res = await rawGet(`${stack.url}/assets/docs/swagger-ui-bundle.js`, { 'accept-encoding': accept });
    expect(res.headers['content-encoding']).toBe(encoding);
    expect(res.headers.vary).toBe('accept-encoding');
    expect(res.headers['content-type']).toBe('text/javascript; charset=utf-8');
    expect(res.body.equals(readFileSync(join(built, file)))).toBe(true);
    const decoded = encoding === 'br' ? brotliDecompressSync(res.body) : gunzipSync(res.body);
    expect(decoded.equals(plain)).toBe(true);
  }
  const identity = await rawGet(`${stack.url}/assets/docs/swagger-ui-bundle.js`, {});
  expect(identity.headers['content-encoding']).toBeUndefined();
  expect(identity.body.equals(plain)).toBe(true);
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
    const dialog = await openAuthorize(page);
    await dialog.getByText('session (apiKey)').waitFor();
    await dialog.getByRole('button', { name: 'Close' }).first().click();

    // The error codes, with their HTTP status, and the quick starts' code.
    const rows = page.locator('table.error-codes tbody tr');
    expect(await rows.count()).toBe(Object.keys(ERROR_CODES).length);
    for (const [code, { http }] of Object.entries(ERROR_CODES))
      await expect(page.locator('table.error-codes tr', { hasText: code }).locator('td').nth(1).textContent()).resolves.toBe(String(http));
    await expect(page.locator('#sdk-quick-start + p + pre').textContent()).resolves.toContain(
      "import { SvcClient, NotFoundError } from '@svc/sdk'",
    );
    await expect(page.locator('#cli-quick-start + p + pre').textContent()).resolves.toContain('svc whoami');
  });
  expect(problems).toEqual([]);
});

it('passes axe-core with an operation open and tried, its schema expanded, and the Authorize dialog open', async () => {
  // The one axe-core check of /docs (the console suite's page loop leaves it here): the page as it loads, with what
  // opens on a click on top of it (same axe-core defaults as the console's pages).
  const { page, problems } = await browser.newPage();
  const serious = async () => {
    await page.evaluate(AXE);
    const violations: Array<{ id: string; impact: string; nodes: Array<{ target: string[]; failureSummary: string }> }> =
      await page.evaluate(
        async () => ((await (globalThis as any).axe.run((globalThis as any).document, { resultTypes: ['violations'] })) as any).violations,
      );
    return violations
      .filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .map((v) => `${v.id} (${v.nodes.length} nodes): ${v.nodes[0].target.join(' ')}: ${v.nodes[0].failureSummary}`);
  };
  await step(page, 'docs-axe', async () => {
    await page.goto(`${stack.url}/docs`);
    await page.locator('#reference[aria-busy="false"]').waitFor({ timeout: 30_000 });

    const create = page.locator('#operations-projects-createProject');
    await create.locator('.opblock-summary-control').click();
    await page.waitForURL(/#\/projects\/createProject$/); // still deep-linked, without a link inside the button
    await create.getByText('Schema', { exact: true }).first().click();
    await create.locator('button.json-schema-2020-12-accordion[aria-label="Schema"]').first().waitFor(); // untitled, named

    const list = page.locator('#operations-projects-listProjects');
    await list.locator('.opblock-summary-control').click();
    await list.getByRole('button', { name: 'Try it out' }).click();
    await list.getByRole('button', { name: 'Execute' }).click();
    await list.locator('.live-responses-table').waitFor();

    await page.locator('section.models').getByRole('button', { name: 'Expand all' }).first().click();

    await page.getByRole('combobox', { name: 'Servers', exact: true }).waitFor(); // the server picker, named
    const dialog = await openAuthorize(page);
    // Everything opened so far stays open behind the dialog: one run sees the operation, the tried request, the
    // schemas and the dialog together.
    const found = await serious();
    await dialog.getByRole('button', { name: 'Close' }).last().click();
    expect(found).toEqual([]);
  });
  expect(problems).toEqual([]);
}, 180_000); // an axe-core run over a hundred operations: about 12 s on the 2-core machine
