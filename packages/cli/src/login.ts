/**
 * `svc login`: the browser flow of spec 3 / CONTRACT.md 4 and 7. The terminal makes a state and a PKCE verifier,
 * starts the login, prints the address and the code, opens the browser where it can, polls at the interval the
 * service gave (a spinner on a terminal), then exchanges the approved login for a token once.
 */
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createSpinner } from 'nanospinner';
import { DEFAULT_PROFILE, removeCredentials } from './credentials';
import { Api } from './api';
import { USER_AGENT, UsageError, VERSION, type Context } from './context';

/** Opens the address in a browser when there is one to open: never without a terminal, a display, or with BROWSER=none. */
function openBrowser(url: string, env: NodeJS.ProcessEnv): boolean {
  if (!process.stdout.isTTY || env.BROWSER === 'none') return false;
  const command = env.BROWSER || (process.platform === 'darwin' ? 'open' : process.platform === 'win32' ? 'explorer' : 'xdg-open');
  if (process.platform === 'linux' && !env.BROWSER && !env.DISPLAY && !env.WAYLAND_DISPLAY) return false;
  try {
    const child = spawn(command, [url], { stdio: 'ignore', detached: true });
    child.on('error', () => undefined);
    child.unref();
    return true;
  } catch {
    return false;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function loginWithBrowser(ctx: Context): Promise<void> {
  const api = ctx.anonymous();
  const state = randomBytes(32).toString('hex');
  const verifier = randomBytes(32).toString('base64url');
  const started = await api.call<{ loginId: string; authUrl: string; verificationCode: string; interval: number }>(
    'POST',
    '/cli/auth/start',
    {
      body: {
        state,
        codeChallenge: createHash('sha256').update(verifier).digest('base64url'),
        codeChallengeMethod: 'S256',
        cliVersion: VERSION,
        platform: `${process.platform}-${process.arch}`,
      },
    },
  );
  // Plain text, also when the output is not a terminal: a script or another program can read both. With --json, one
  // JSON object per line (as streams print): this one, then the signed-in one.
  if (ctx.json) ctx.out(JSON.stringify({ event: 'login_started', authUrl: started.authUrl, verificationCode: started.verificationCode }));
  else ctx.out(`Open this address in your browser to sign in:\n\n  ${started.authUrl}\n\nVerification code: ${started.verificationCode}\n`);
  if (openBrowser(started.authUrl, ctx.env)) ctx.out('(Opened your browser.)');
  const spinner = process.stdout.isTTY && !ctx.json ? createSpinner('Waiting for approval in the browser…').start() : null;
  const intervalMs = Math.max(1, started.interval) * 1000;
  try {
    for (;;) {
      await sleep(intervalMs);
      const { status } = await api.call<{ status: string }>('GET', '/cli/auth/status', { query: { loginId: started.loginId } });
      if (status === 'approved') break;
      if (status !== 'pending') {
        spinner?.error({ text: 'Not approved' });
        throw new UsageError('The login was denied in the browser or expired. Run svc login to try again.');
      }
    }
    const done = await api.call('POST', '/cli/auth/token', { body: { loginId: started.loginId, codeVerifier: verifier } });
    const file = ctx.saveCredentials({
      baseUrl: ctx.baseUrl,
      accessToken: done.token,
      refreshToken: done.refreshToken,
      expiresAt: done.expiresIn ? Date.now() + done.expiresIn * 1000 : undefined,
      email: done.user.email,
      tenant: done.tenant.name,
    });
    spinner?.success({ text: 'Approved' });
    const signedIn = { user: done.user, tenant: done.tenant, credentialsFile: file };
    if (ctx.json) ctx.out(JSON.stringify({ event: 'signed_in', ...signedIn }));
    else ctx.out(`Signed in as ${done.user.email} (tenant ${done.tenant.name})${profileNote(ctx)}.`);
  } finally {
    if (spinner?.isSpinning()) spinner.stop();
  }
}

const profileNote = (ctx: Context) => (ctx.profile === DEFAULT_PROFILE ? '' : `, profile ${ctx.profile}`);

export async function loginWithApiKey(ctx: Context, apiKey: string): Promise<void> {
  const me = await new Api({ baseUrl: ctx.baseUrl, apiKey, userAgent: USER_AGENT }).call('GET', '/auth/me');
  ctx.saveCredentials({ baseUrl: ctx.baseUrl, apiKey, email: me.user.email, tenant: me.tenant.name });
  ctx.print(me, () => `Signed in with an API key as ${me.user.email} (tenant ${me.tenant.name})${profileNote(ctx)}.`);
}

export async function logout(ctx: Context): Promise<void> {
  const creds = ctx.credentials();
  // A CLI token is a session: end it on the service too (an API key stays valid: revoke it with svc keys revoke).
  if (creds?.accessToken)
    await ctx
      .api()
      .call('POST', '/auth/logout')
      .catch(() => undefined);
  const removed = removeCredentials(ctx.env, ctx.profile);
  ctx.print({ signedOut: removed }, () => (removed ? 'Signed out.' : 'Not signed in.'));
}
