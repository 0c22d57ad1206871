/**
 * `npm run bench:console`: the console's weight and time to first render, from the gateway of the whole system as
 * `npm start` runs it, in Debian's chromium (a fresh context per load: nothing cached). Per page: the time from
 * navigation start to the first contentful paint and to the page's heading drawn by its script (the data loaded and
 * rendered), and the compressed bytes of JavaScript and CSS it fetched. Baseline in the same run: the sign-in page,
 * the smallest page (a form, no data). Results go to bench/results/console.json.
 */
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { chromium } from 'playwright-core';
import { CHROMIUM } from '../test/helpers/browser';
import { ROOT, runBench, startNpmStart } from './lib';

const LOADS = Number(process.env.BENCH_CONSOLE_LOADS ?? 15);
const RESULTS = resolve(ROOT, 'bench/results/console.json');
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const round = (x: number) => Math.round(x * 10) / 10;

async function main() {
  const base = `http://127.0.0.1:${(await startNpmStart()).port}`;
  const reg = await fetch(`${base}/api/v1/auth/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: `console${Date.now()}@example.com`, password: 'bench-password', name: 'Bench', tenantName: 'Bench' }),
  });
  const session = /svc_session=([^;]+)/.exec(reg.headers.get('set-cookie') ?? '')![1];
  for (let i = 0; i < 20; i++) {
    await fetch(`${base}/api/v1/projects`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', cookie: `svc_session=${session}`, origin: base },
      body: JSON.stringify({ name: `project ${i}` }),
    });
  }

  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-gpu'] });
  const pages = [
    { path: '/login', heading: '#app h1', signedIn: false },
    { path: '/projects', heading: '#app h1', signedIn: true },
    // The chart drawn, not only its canvas: Chart.js loads beside the data.
    { path: '/usage', heading: '#app canvas[data-drawn]', signedIn: true },
    // Every other console page (issue 34: each under 60 KB of compressed JavaScript).
    ...['/agents', '/chat', '/webhooks', '/models', '/requests', '/events', '/mcp-servers', '/audit-log'].map((path) => ({
      path,
      heading: '#app h1',
      signedIn: true,
    })),
    ...[
      '/settings/security/api-keys',
      '/settings/security/network',
      '/settings/secrets',
      '/settings/team',
      '/settings/regions',
      '/settings/billing',
    ].map((path) => ({ path, heading: '#app h1', signedIn: true })),
  ];
  const results: Record<string, unknown> = {};
  for (const p of pages) {
    const fcp: number[] = [];
    const rendered: number[] = [];
    let js = 0;
    let css = 0;
    for (let i = 0; i < LOADS; i++) {
      const context = await browser.newContext();
      if (p.signedIn) await context.addCookies([{ name: 'svc_session', value: session, url: base }]);
      const page = await context.newPage();
      await page.goto(`${base}${p.path}`);
      await page.waitForSelector(p.heading);
      const t = await page.evaluate(() => ({
        now: performance.now(),
        fcp: performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? NaN,
        resources: (performance.getEntriesByType('resource') as any[]).map((r) => ({
          name: r.name,
          bytes: r.encodedBodySize,
        })),
      }));
      fcp.push(t.fcp);
      rendered.push(t.now);
      js = t.resources.filter((r) => r.name.endsWith('.js')).reduce((n, r) => n + r.bytes, 0);
      css = t.resources.filter((r) => r.name.endsWith('.css')).reduce((n, r) => n + r.bytes, 0);
      await context.close();
    }
    results[p.path] = {
      firstContentfulPaintMs: { p50: round(pct(fcp, 50)), p95: round(pct(fcp, 95)) },
      renderedMs: { p50: round(pct(rendered, 50)), p95: round(pct(rendered, 95)) },
      compressedKb: { js: round(js / 1024), css: round(css / 1024) },
    };
    console.log(p.path, results[p.path]);
  }
  await browser.close();
  writeFileSync(RESULTS, JSON.stringify({ date: new Date().toISOString(), loads: LOADS, pages: results }, null, 2) + '\n');
  console.log(`\nwritten to ${RESULTS}`);
}

runBench(main);
