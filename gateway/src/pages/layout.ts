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
const select = (id: string, label: string, options: readonly string[], name = id) =>
  `<p class="field"><label for="${id}">${label}</label><select id="${id}" name="${name}">${options.map((o) => `<option value="${esc(o)}">${esc(o)}</option>`).join('')}</select></p>`;

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

export function apiKeysPage(scopes: readonly string[], types: readonly string[], environments: readonly string[]): string {
  return layout({
    title: 'API keys',
    page: 'api-keys',
    signedIn: true,
    path: '/settings/security/api-keys',
    body: `<h1>API keys</h1>
<section aria-labelledby="create-title">
<h2 id="create-title">Create a key</h2>
<form id="create-key-form" novalidate>
${field('key-name', 'Name', 'name="name" required maxlength="100"')}
${select('key-type', 'Type', types, 'type')}
${select('key-environment', 'Environment', environments, 'environment')}
<fieldset><legend>Scopes (none: the key may do everything your role may)</legend>
${scopes.map((s) => `<label class="check"><input type="checkbox" name="scopes" value="${esc(s)}"> ${esc(s)}</label>`).join('\n')}
</fieldset>
<p><button type="submit">Create key</button></p>
</form>
</section>
<section id="new-key" hidden aria-labelledby="new-key-title">
<h2 id="new-key-title">Your new key</h2>
<p>Copy it now: it is shown only once.</p>
<p class="field"><label for="new-key-value">Key</label><input id="new-key-value" readonly></p>
<p><button type="button" id="copy-key">Copy</button> <span id="copied" role="status"></span></p>
</section>
<section aria-labelledby="list-title">
<h2 id="list-title">Keys</h2>
<table id="keys"><thead><tr><th scope="col">Name</th><th scope="col">Key</th><th scope="col">Type</th><th scope="col">Environment</th><th scope="col">Scopes</th><th scope="col">Created</th><th scope="col">Last used</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead><tbody></tbody></table>
<p id="no-keys" hidden>No keys yet.</p>
</section>`,
  });
}

export function networkPage(): string {
  return layout({
    title: 'Network',
    page: 'network',
    signedIn: true,
    path: '/settings/security/network',
    body: `<h1>Network allowlist</h1>
<p>When the list is not empty, API keys work only from these addresses. Signed-in sessions are not limited.</p>
<form id="network-form" novalidate>
<p class="field"><label for="allowlist">Allowed addresses (one IP address or CIDR range per line, IPv4 or IPv6)</label>
<textarea id="allowlist" name="allowlist" rows="8" spellcheck="false"></textarea></p>
<p><button type="submit">Save</button></p>
</form>`,
  });
}

export function billingPage(plans: readonly string[]): string {
  return layout({
    title: 'Billing',
    page: 'billing',
    signedIn: true,
    path: '/settings/billing',
    body: `<h1>Billing</h1>
<dl class="facts"><dt>Plan</dt><dd id="plan"></dd><dt>Credits</dt><dd id="balance"></dd><dt>Usage</dt><dd id="usage"></dd></dl>
<section aria-labelledby="buy-title"><h2 id="buy-title">Buy credits</h2>
<form id="buy-form" novalidate>${field('credits', 'Credits', 'name="credits" type="number" min="1" max="10000000" step="1" required value="1000"')}
<p><button type="submit">Buy credits</button></p></form></section>
<section aria-labelledby="gift-title"><h2 id="gift-title">Redeem a gift card</h2>
<form id="gift-form" novalidate>${field('gift-code', 'Gift card code', 'name="code" required maxlength="64" autocomplete="off"')}
<p><button type="submit">Redeem</button></p></form></section>
<section aria-labelledby="plan-title"><h2 id="plan-title">Change plan</h2>
<form id="plan-form" novalidate>${select('plan-choice', 'Plan', plans, 'plan')}
<p><button type="submit">Subscribe</button></p></form></section>
<section aria-labelledby="invoices-title"><h2 id="invoices-title">Invoices</h2>
<table id="invoices"><thead><tr><th scope="col">Date</th><th scope="col">Description</th><th scope="col">Amount</th><th scope="col">Status</th><th scope="col">Provider</th></tr></thead><tbody></tbody></table>
<p id="no-invoices" hidden>No invoices yet.</p></section>`,
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
