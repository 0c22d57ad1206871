import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { API_KEY_ENVIRONMENTS, API_KEY_TYPES, SCOPES } from '@svc/kit';
import { apiKeysPage, billingPage, cliLoginPage, loginPage, networkPage, oauthCallbackPage, PAGE_CSP } from './layout';

/** The stylesheet and the script, read once; served with an ETag so a change is picked up at once. */
function asset(file: string, type: string) {
  const body = readFileSync(join(__dirname, 'assets', file));
  return { url: `/assets/${file}`, body, type, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"` };
}

/**
 * The web pages (CONTRACT.md 7): sign in / sign up, the CLI approval, API keys, the network allowlist and the sandbox
 * billing portal. Pages are public shells; their script reads the API with the session cookie, and a visitor who is
 * not signed in is sent to /login and back.
 */
export function registerPages(app: FastifyInstance): void {
  const html = (render: (request: FastifyRequest) => string) => async (request: FastifyRequest, reply: FastifyReply) =>
    reply
      .header('content-type', 'text/html; charset=utf-8')
      .header('content-security-policy', PAGE_CSP)
      .header('cache-control', 'no-store')
      .send(render(request));

  const keysPage = apiKeysPage(SCOPES, Object.keys(API_KEY_TYPES), API_KEY_ENVIRONMENTS);
  const pages: Record<string, (request: FastifyRequest) => string> = {
    '/login': (request) => loginPage((request.query as Record<string, string>).signup === '1'),
    '/cli/login': () => cliLoginPage(),
    '/settings/security/api-keys': () => keysPage,
    '/settings/security/network': () => networkPage(),
    '/settings/billing': () => billingPage(['starter', 'growth', 'enterprise']),
    // Where an OpenID Connect provider sends the browser back; the script completes the sign-in.
    '/oauth/:provider/callback': () => oauthCallbackPage(),
  };
  for (const [url, render] of Object.entries(pages)) app.get(url, html(render));

  for (const a of [asset('app.js', 'text/javascript; charset=utf-8'), asset('app.css', 'text/css; charset=utf-8')]) {
    app.get(a.url, async (request, reply) => {
      reply.header('content-type', a.type).header('etag', a.etag).header('cache-control', 'no-cache');
      if (request.headers['if-none-match'] === a.etag) return reply.code(304).send();
      return reply.send(a.body);
    });
  }
}
