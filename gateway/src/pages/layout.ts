/**
 * The web pages' HTML: small server-rendered shells (no user data in them: the script fills it in with
 * textContent), one stylesheet and one script from /assets, nothing inline, so the Content-Security-Policy can
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
  ['/settings/team', 'Team'],
  ['/settings/billing', 'Billing'],
];

/** The nav entry a path belongs to: itself, or the section it sits under (/agents/:id is under Agents). */
const current = (href: string, path = '') => path === href || path.startsWith(`${href}/`);

/**
 * A page: `page` names the script's part for it; `signedIn` pages show the navigation and the sign-out button.
 * `console` pages run the console's bundle and render into #app; the others run the hand-written app.js.
 */
export function layout(opts: { title: string; page: string; signedIn: boolean; body: string; path?: string; console?: boolean }): string {
  const nav = opts.signedIn
    ? `<header class="bar"><nav aria-label="Console"><ul>${NAV.map(
        ([href, label]) => `<li><a href="${href}"${current(href, opts.path) ? ' aria-current="page"' : ''}>${label}</a></li>`,
      ).join(
        '',
      )}</ul></nav><p class="who"><a href="/docs">API reference</a> · <span id="who"></span> <button type="button" id="sign-out" class="link">Sign out</button></p></header>`
    : '';
  const script = opts.console ? '/assets/console/main.js' : '/assets/app.js';
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(opts.title)} · svc</title>
<link rel="stylesheet" href="/assets/app.css">
<script type="module" src="${script}"></script>
</head>
<body data-page="${esc(opts.page)}">
${nav}
<main id="main">
${opts.body}
<p id="status" role="status" aria-live="polite"></p>
<p id="error" role="alert" class="error" hidden></p>
</main>
</body>
</html>
`;
}

const field = (id: string, label: string, attrs: string) =>
  `<p class="field"><label for="${id}">${label}</label><input id="${id}" ${attrs}></p>`;

export function loginPage(signup: boolean): string {
  const body = signup
    ? `<h1>Create an account</h1>
<form id="signup-form" novalidate>
${field('name', 'Name', 'name="name" autocomplete="name" required maxlength="200"')}
${field('email', 'Email', 'name="email" type="email" autocomplete="email" required')}
${field('password', 'Password', 'name="password" type="password" autocomplete="new-password" required minlength="8"')}
${field('tenantName', 'Organization', 'name="tenantName" autocomplete="organization" required maxlength="200"')}
<p><button type="submit">Create account</button></p>
</form>
<p>Already have an account? <a id="to-signin" href="/login">Sign in</a></p>`
    : `<h1>Sign in</h1>
<form id="signin-form" novalidate>
${field('email', 'Email', 'name="email" type="email" autocomplete="username" required')}
${field('password', 'Password', 'name="password" type="password" autocomplete="current-password" required')}
<p><button type="submit">Sign in</button></p>
</form>
<p><a id="to-forgot" href="/forgot-password">Forgot password?</a></p>
<p>New here? <a id="to-signup" href="/login?signup=1">Create an account</a></p>`;
  return layout({ title: signup ? 'Create an account' : 'Sign in', page: 'login', signedIn: false, body });
}

export function cliLoginPage(): string {
  return layout({
    title: 'Approve the CLI login',
    page: 'cli-login',
    signedIn: false,
    body: `<h1>Sign in the command-line client</h1>
<section id="request" hidden aria-labelledby="request-title">
<h2 id="request-title">Check the code</h2>
<p>Your terminal shows this code. Approve only if it is the same.</p>
<p class="code" id="code" aria-label="Verification code"></p>
<dl class="facts"><dt>CLI version</dt><dd id="cli-version"></dd><dt>Platform</dt><dd id="platform"></dd><dt>Signed in as</dt><dd id="account"></dd><dt>Expires</dt><dd id="expires"></dd></dl>
<p class="actions"><button type="button" id="approve">Approve</button> <button type="button" id="deny" class="secondary">Deny</button></p>
</section>
<section id="outcome" hidden><h2 id="outcome-title"></h2><p id="outcome-text"></p></section>`,
  });
}

export function oauthCallbackPage(): string {
  return layout({
    title: 'Signing in',
    page: 'oauth-callback',
    signedIn: false,
    body: `<h1>Signing you in…</h1>
<p><a href="/login">Back to sign in</a></p>`,
  });
}
