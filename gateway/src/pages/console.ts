import { PUBLIC_EVENT_TYPES, API_KEY_ENVIRONMENTS, API_KEY_TYPES, ROLES, SCOPES } from '@svc/contracts';
import { esc, layout } from './layout';

interface ConsolePage {
  /** The console script's name for the page (gateway/console/main.tsx). */
  page: string;
  /** The document's title, or a function of the query string for a page that is two (sign in or sign up). */
  title: string | ((query: Record<string, string | undefined>) => string);
  /** What the page's script needs from the server, as JSON in #app's data-props. */
  props?: Record<string, unknown>;
  /** Drawn for a visitor who may not be signed in (sign-in, the CLI approval, the emailed links): no navigation. */
  public?: boolean;
}

/** Console page path -> its page. The page itself is drawn by gateway/console. */
export const CONSOLE_PAGES: Record<string, ConsolePage> = {
  '/login': { page: 'login', title: (q) => (q.signup === '1' ? 'Create an account' : 'Sign in'), public: true },
  '/cli/login': { page: 'cli-login', title: 'Approve the CLI login', public: true },
  // Where an OpenID Connect provider sends the browser back; the page completes the sign-in.
  '/oauth/:provider/callback': { page: 'oauth-callback', title: 'Signing in', public: true },
  '/projects': { page: 'projects', title: 'Projects' },
  '/agents': { page: 'agents', title: 'Agents' },
  '/agents/:id': { page: 'agent', title: 'Agent' },
  '/chat': { page: 'chat', title: 'Chat' },
  '/chat/:sessionId': { page: 'chat', title: 'Chat' },
  '/webhooks': { page: 'webhooks', title: 'Webhooks', props: { eventTypes: PUBLIC_EVENT_TYPES } },
  '/webhooks/:id': { page: 'webhook', title: 'Webhook' },
  '/usage': { page: 'usage', title: 'Usage' },
  '/settings/team': { page: 'team', title: 'Team', props: { roles: ROLES } },
  '/settings/secrets': { page: 'secrets', title: 'Secrets' },
  '/models': { page: 'models', title: 'Models' },
  '/models/default': { page: 'default-model', title: 'Default model' },
  '/requests': { page: 'requests', title: 'Requests' },
  '/mcp-servers': { page: 'mcp-servers', title: 'MCP servers' },
  '/audit-log': { page: 'audit-log', title: 'Audit log' },
  '/events': { page: 'events', title: 'Events', props: { eventTypes: PUBLIC_EVENT_TYPES } },
  '/settings/security/api-keys': {
    page: 'api-keys',
    title: 'API keys',
    props: { scopes: SCOPES, types: Object.keys(API_KEY_TYPES), environments: API_KEY_ENVIRONMENTS },
  },
  '/settings/security/network': { page: 'network', title: 'Network' },
  '/settings/regions': { page: 'regions', title: 'Regions and storage' },
  '/settings/billing': { page: 'billing', title: 'Billing' },
  '/invitations/:token': { page: 'invitation', title: 'Join your team', public: true },
  '/forgot-password': { page: 'forgot-password', title: 'Reset your password', public: true },
  '/reset-password/:token': { page: 'reset-password', title: 'Choose a new password', public: true },
  '/verify-email/:token': { page: 'verify-email', title: 'Verify your email', public: true },
};

/**
 * A console page's shell: the navigation and an empty #app the console's script renders into; `preload`, the
 * console's chunks for the page (layout).
 */
export function consolePage(
  { page, title, props, public: open }: ConsolePage,
  path: string,
  query: Record<string, string | undefined> = {},
  preload?: readonly string[],
): string {
  const data = props ? ` data-props="${esc(JSON.stringify(props))}"` : '';
  return layout({
    title: typeof title === 'string' ? title : title(query),
    page,
    signedIn: !open,
    path: path.replace(/\/:.*$/, ''),
    body: `<div id="app"${data}></div>`,
    preload,
  });
}
