/**
 * Debian's chromium driven by playwright-core (never a downloaded browser). `step` runs one test's browser work and
 * keeps a screenshot of the page when it fails, under test-results/screenshots/.
 */
import { mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { chromium, type BrowserContext, type Page, type Request } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';
const SHOTS = resolve(__dirname, '../../test-results/screenshots');

export interface Browser {
  /** A fresh context (no cookies) and a page in it; CSP violations and page errors are collected. */
  newPage(): Promise<{ page: Page; context: BrowserContext; problems: string[] }>;
  close(): Promise<void>;
}

export async function launchBrowser(): Promise<Browser> {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  return {
    async newPage() {
      // One browser, a fresh context (its own cookies and storage) per page: like a new private window.
      const context = await browser.newContext();
      await context.grantPermissions(['clipboard-read', 'clipboard-write']).catch(() => undefined);
      const page = await context.newPage();
      const problems: string[] = [];
      page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
      page.on('console', (m) => {
        if (m.type() === 'error' && /Content Security Policy|Refused to/i.test(m.text())) problems.push(`csp: ${m.text()}`);
      });
      return { page, context, problems };
    },
    close: () => browser.close(),
  };
}

/** Runs `fn`; on failure saves a full-page screenshot named after the test, then fails as `fn` did. */
export async function step(page: Page, name: string, fn: () => Promise<void>): Promise<void> {
  try {
    await fn();
  } catch (err) {
    mkdirSync(SHOTS, { recursive: true });
    const file = join(SHOTS, `${name.replace(/[^\w-]+/g, '-')}-${Date.now()}.png`);
    await page.screenshot({ path: file, fullPage: true }).catch(() => undefined);
    (err as Error).message += `\n(screenshot: ${file})`;
    throw err;
  }
}

/**
 * Follows a page's requests from now on; `quiet()` resolves once none has been in flight for `ms`. Playwright's
 * `networkidle` is the same wait with a fixed 500 ms of silence, paid again on every page a loop visits.
 */
export function trackRequests(page: Page) {
  const inflight = new Set<Request>();
  page.on('request', (r) => inflight.add(r));
  page.on('requestfinished', (r) => inflight.delete(r));
  page.on('requestfailed', (r) => inflight.delete(r));
  return {
    async quiet(ms = 100, timeoutMs = 30_000): Promise<void> {
      const deadline = Date.now() + timeoutMs;
      let since = Date.now();
      for (;;) {
        if (inflight.size) since = Date.now();
        else if (Date.now() - since >= ms) return;
        if (Date.now() > deadline)
          throw new Error(`requests still in flight after ${timeoutMs} ms: ${[...inflight].map((r) => r.url()).join(', ')}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
  };
}

/** A page in a fresh context carrying `cookie` (an Account's `svc_session=...`): a signed-in browser. */
export async function signedInPage(browser: Browser, baseUrl: string, cookie: string) {
  const opened = await browser.newPage();
  await opened.context.addCookies([{ name: 'svc_session', value: cookie.split('=').slice(1).join('='), url: baseUrl }]);
  return opened;
}

/** Console and settings pages: one `nav` landmark with these links (CONTRACT.md 7). */
export const CONSOLE_NAV = [
  'Projects',
  'Agents',
  'Chat',
  'Webhooks',
  'Usage',
  'Models',
  'Requests',
  'API keys',
  'Network',
  'Team',
  'Billing',
];
