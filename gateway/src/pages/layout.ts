/**
 * The web pages' HTML: small server-rendered shells (no user data in them: the console's script draws the page),
 * one stylesheet and one script from /assets, nothing inline, so the Content-Security-Policy can
 * forbid inline code and every other origin.
 */
const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export const esc = (s: string) => s.replace(/[&<>"']/g, (c) => ESCAPES[c]);

export const PAGE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "form-action 'self'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** The one navigation of every console and settings page (CONTRACT.md 7). */
const NAV: Array<[string, string]> = [
  ['/projects', 'Projects'],
  ['/agents', 'Agents'],
  ['/chat', 'Chat'],
  ['/webhooks', 'Webhooks'],
  ['/usage', 'Usage'],
  ['/models', 'Models'],
  ['/requests', 'Requests'],
  ['/events', 'Events'],
  ['/mcp-servers', 'MCP servers'],
  ['/audit-log', 'Audit log'],
  ['/settings/security/api-keys', 'API keys'],
  ['/settings/security/network', 'Network'],
  ['/settings/secrets', 'Secrets'],
  ['/settings/regions', 'Regions'],
  ['/settings/team', 'Team'],
  ['/settings/billing', 'Billing'],
];

/** The nav entry a path belongs to: itself, or the section it sits under (/agents/:id is under Agents). */
const current = (href: string, path = '') => path === href || path.startsWith(`${href}/`);

/**
 * A page: `page` names the console's page for it (gateway/console/main.tsx), which renders into #app; `signedIn`
 * pages show the navigation and the sign-out button. `preload` names the console's chunks the page runs (file names
 * under /assets/console/, from the build's manifest), fetched beside the entry rather than one import after another.
 */
export function layout(opts: {
  title: string;
  page: string;
  signedIn: boolean;
  body: string;
  path?: string;
  preload?: readonly string[];
}): string {
  const preload = (opts.preload ?? []).map((file) => `\n<link rel="modulepreload" href="/assets/console/${esc(file)}">`).join('');
  const nav = opts.signedIn
    ? `<header class="bar"><nav aria-label="Console"><ul>${NAV.map(
        ([href, label]) => `<li><a href="${href}"${current(href, opts.path) ? ' aria-current="page"' : ''}>${label}</a></li>`,
      ).join(
        '',
      )}</ul></nav><p class="who"><a href="/docs">API reference</a> · <span id="who"></span> <button type="button" id="sign-out" class="link">Sign out</button></p></header>`
    : '';
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(opts.title)} · svc</title>
<link rel="stylesheet" href="/assets/app.css">
<script type="module" src="/assets/console/main.js"></script>${preload}
</head>
<body data-page="${esc(opts.page)}">
${nav}
<main id="main">
${opts.body}
<p id="error" role="alert" class="error" hidden></p>
</main>
</body>
</html>
`;
}
