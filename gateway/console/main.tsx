// The console's entry: the server sends a page shell (layout.ts) naming its page in `data-page`; this loads that
// page's module (each its own chunk, so a page downloads only what it uses) and mounts it into #app.
import { render } from 'preact';
import { call, describe, isUnauthorized, toLogin } from './sdk';
import type { Me } from './ui';

const PAGES: Record<string, () => Promise<{ default: (props: { me: Me }) => preact.JSX.Element }>> = {
  projects: () => import('./pages/projects'),
  agents: () => import('./pages/agents'),
  agent: () => import('./pages/agent'),
  chat: () => import('./pages/chat'),
  webhooks: () => import('./pages/webhooks'),
  webhook: () => import('./pages/webhook'),
  usage: () => import('./pages/usage'),
  team: () => import('./pages/team'),
  secrets: () => import('./pages/secrets'),
  models: () => import('./pages/models'),
  'default-model': () => import('./pages/default-model'),
  requests: () => import('./pages/requests'),
  'mcp-servers': () => import('./pages/mcp-servers'),
  'audit-log': () => import('./pages/audit-log'),
  events: () => import('./pages/events'),
  'api-keys': () => import('./pages/api-keys'),
  network: () => import('./pages/network'),
  regions: () => import('./pages/regions'),
  billing: () => import('./pages/billing'),
};

/**
 * Pages drawn for a visitor who may not be signed in: sign-in and sign-up, the OpenID callback, the emailed links and
 * the reset request; and the CLI approval, which asks for the session itself (after its own check of the link).
 */
const PUBLIC_PAGES: Record<string, () => Promise<{ default: () => preact.JSX.Element }>> = {
  login: () => import('./pages/login'),
  'cli-login': () => import('./pages/cli-login'),
  'oauth-callback': () => import('./pages/oauth-callback'),
  invitation: () => import('./pages/invitation'),
  'forgot-password': () => import('./pages/forgot-password'),
  'reset-password': () => import('./pages/reset-password'),
  'verify-email': () => import('./pages/verify-email'),
};

function showError(err: unknown) {
  const el = document.getElementById('error')!;
  el.textContent = describe(err);
  el.hidden = false;
}

async function boot() {
  const open = PUBLIC_PAGES[document.body.dataset.page ?? ''];
  if (open) return open().then(({ default: Page }) => render(<Page />, document.getElementById('app')!), showError);
  document.getElementById('sign-out')?.addEventListener('click', async () => {
    await call('logout', {}).catch(() => undefined);
    location.assign('/login');
  });
  // The page's module is fetched while the session is asked for, not after: neither needs the other.
  const loading = PAGES[document.body.dataset.page ?? '']?.();
  loading?.catch(() => undefined); // its failure is shown below, once signed in
  let me: Me;
  try {
    me = (await call('me', {})) as unknown as Me;
  } catch (err) {
    if (isUnauthorized(err)) return toLogin();
    return showError(err);
  }
  const who = document.getElementById('who');
  if (who) who.textContent = `${me.user.email} · ${me.tenant.name}`;
  const root = document.getElementById('app');
  if (!loading || !root) return;
  try {
    const Page = (await loading).default;
    render(<Page me={me} />, root);
  } catch (err) {
    showError(err);
  }
}

void boot();
