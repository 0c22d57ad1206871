/**
 * Starts the OpenID provider peer (test/helpers/oidc-provider.mjs) and plays the browser against it: follows its
 * redirects with a cookie jar until it sends the browser back to the client's redirect URI.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { resolve } from 'node:path';

export interface OidcClient {
  client_id: string;
  client_secret: string;
  redirect_uris: string[];
  grant_types?: string[];
  response_types?: string[];
  token_endpoint_auth_method?: string;
  id_token_signed_response_alg?: string;
}

export interface OidcPeer {
  issuer: string;
  /** The next interactive sign-in (without login_hint) is this account's. */
  loginAs(account: string): Promise<void>;
  /** Follows an authorization URL like a browser would; answers the URL the provider redirected back to. */
  authorize(url: string, redirectPrefix: string): Promise<URL>;
  /** A fresh ID token for `client` (the test is the relying party): the whole code flow with PKCE. */
  idToken(client: OidcClient, account: string): Promise<string>;
  stop(): Promise<void>;
}

export async function startOidcPeer(clients: OidcClient[], accounts: Record<string, Record<string, unknown>>): Promise<OidcPeer> {
  const proc: ChildProcess = spawn(process.execPath, [resolve(__dirname, 'oidc-provider.mjs')], {
    env: { PATH: process.env.PATH, OIDC_CLIENTS: JSON.stringify(clients), OIDC_ACCOUNTS: JSON.stringify(accounts) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  proc.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  const issuer = await new Promise<string>((ok, fail) => {
    let out = '';
    proc.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      const line = out.split('\n')[0];
      if (out.includes('\n')) ok((JSON.parse(line) as { issuer: string }).issuer);
    });
    proc.once('exit', (code) => fail(new Error(`oidc provider exited ${code}: ${err}`)));
  });

  async function authorize(url: string, redirectPrefix: string): Promise<URL> {
    const jar = new Map<string, string>();
    let next = url;
    for (let hops = 0; hops < 20; hops++) {
      if (next.startsWith(redirectPrefix)) return new URL(next);
      const res = await fetch(next, {
        redirect: 'manual',
        headers: { cookie: [...jar].map(([k, v]) => `${k}=${v}`).join('; ') },
      });
      for (const c of res.headers.getSetCookie()) {
        const [pair] = c.split(';');
        const eq = pair.indexOf('=');
        jar.set(pair.slice(0, eq), pair.slice(eq + 1));
      }
      const location = res.headers.get('location');
      if (!location) throw new Error(`the provider answered ${res.status} without a redirect: ${await res.text()}`);
      next = new URL(location, next).toString();
    }
    throw new Error('too many redirects');
  }

  return {
    issuer,
    loginAs: async (account) => void (await fetch(`${issuer}/_test/login-as?account=${encodeURIComponent(account)}`)),
    authorize,
    async idToken(client, account) {
      const verifier = randomBytes(32).toString('base64url');
      const auth = new URL(`${issuer}/auth`);
      auth.search = new URLSearchParams({
        response_type: 'code',
        client_id: client.client_id,
        redirect_uri: client.redirect_uris[0],
        scope: 'openid email profile',
        state: randomBytes(8).toString('hex'),
        nonce: randomBytes(8).toString('hex'),
        login_hint: account,
        code_challenge: createHash('sha256').update(verifier).digest('base64url'),
        code_challenge_method: 'S256',
      }).toString();
      const back = await authorize(auth.toString(), client.redirect_uris[0]);
      const code = back.searchParams.get('code');
      if (!code) throw new Error(`no code: ${back}`);
      const res = await fetch(`${issuer}/token`, {
        method: 'POST',
        headers: {
          authorization: `Basic ${Buffer.from(`${client.client_id}:${client.client_secret}`).toString('base64')}`,
          'content-type': 'application/x-www-form-urlencoded',
        },
        body: new URLSearchParams({
          grant_type: 'authorization_code',
          code,
          redirect_uri: client.redirect_uris[0],
          code_verifier: verifier,
        }),
      });
      const json = (await res.json()) as { id_token?: string };
      if (!json.id_token) throw new Error(`no id_token: ${JSON.stringify(json)}`);
      return json.id_token;
    },
    stop: () =>
      new Promise((ok) => {
        proc.once('exit', () => ok());
        proc.kill('SIGTERM');
      }),
  };
}
