// The script of the pages outside the console (sign-in and sign-up, the CLI approval, the OpenID callback): no build
// step, no dependencies. Everything shown from the API goes in with textContent, never as HTML. Requests are
// same-origin with the session cookie; the browser adds the Origin header the gateway's CSRF rule checks.
const API = '/api/v1';
const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);

class ApiError extends Error {
  constructor(status, body, requestId) {
    const fields = body?.error?.details?.fields;
    const detail = Array.isArray(fields) ? ` ${fields.map((f) => `${f.field}: ${f.message}`).join('; ')}` : '';
    super(`${body?.error?.message ?? `The request failed (HTTP ${status}).`}${detail}`);
    this.status = status;
    this.code = body?.error?.code;
    this.details = body?.error?.details ?? {};
    this.requestId = body?.meta?.request_id ?? requestId;
  }
}

async function api(method, path, body, headers = {}) {
  const res = await fetch(API + path, {
    method,
    credentials: 'same-origin',
    headers: { accept: 'application/json', ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!res.ok) throw new ApiError(res.status, json, res.headers.get('x-request-id'));
  return json?.data;
}

function showError(err) {
  $('status').textContent = '';
  const el = $('error');
  el.textContent = err instanceof ApiError && err.requestId ? `${err.message} (request id ${err.requestId})` : String(err.message ?? err);
  el.hidden = false;
}

/** Only a path on this site: never an address elsewhere (an open redirect). */
function safeNext(next) {
  return typeof next === 'string' && /^\/(?![/\\])/.test(next) ? next : '/projects';
}

function toLogin() {
  location.assign(`/login?next=${encodeURIComponent(location.pathname + location.search)}`);
}

/** The signed-in user, or a trip to the sign-in page that comes back here. */
async function signedIn() {
  try {
    const me = await api('GET', '/auth/me');
    const who = $('who');
    if (who) who.textContent = `${me.user.email} · ${me.tenant.name}`;
    return me;
  } catch (err) {
    if (err.status === 401) toLogin();
    else showError(err);
    return null;
  }
}

/** Runs a form's action with its button disabled, showing any error. */
function onSubmit(form, action) {
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const button = form.querySelector('button[type="submit"]');
    button.disabled = true;
    try {
      await action(new FormData(form));
    } catch (err) {
      // On a signed-in page a 401 means the session ended; on the sign-in form it means wrong credentials.
      if (err.status === 401 && $('sign-out')) toLogin();
      else showError(err);
    } finally {
      button.disabled = false;
    }
  });
}

const when = (iso) => (iso ? new Date(iso).toLocaleString() : 'never');

const pages = {
  login() {
    const next = safeNext(params.get('next'));
    const other = $('to-signup') ?? $('to-signin');
    other.href = `${other.getAttribute('href').split('?')[0]}?${new URLSearchParams({ ...(other.id === 'to-signup' ? { signup: '1' } : {}), next })}`;
    const signin = $('signin-form');
    if (signin)
      onSubmit(signin, async (f) => {
        await api('POST', '/auth/login', { email: f.get('email'), password: f.get('password') });
        location.assign(next);
      });
    const signup = $('signup-form');
    if (signup)
      onSubmit(signup, async (f) => {
        await api('POST', '/auth/register', {
          name: f.get('name'),
          email: f.get('email'),
          password: f.get('password'),
          tenantName: f.get('tenantName'),
        });
        location.assign(next);
      });
    $('email').focus();
  },

  async 'oauth-callback'() {
    const provider = location.pathname.split('/')[2];
    if (params.get('error'))
      return showError(new Error(`The identity provider said: ${params.get('error_description') ?? params.get('error')}`));
    try {
      await api('POST', `/oauth/${encodeURIComponent(provider)}/authorize`, {
        code: params.get('code') ?? '',
        state: params.get('state') ?? '',
      });
      location.replace('/projects');
    } catch (err) {
      showError(err);
    }
  },

  async 'cli-login'() {
    const loginId = params.get('loginId');
    const state = params.get('state');
    const outcome = (title, text) => {
      $('request').hidden = true;
      $('outcome-title').textContent = title;
      $('outcome-text').textContent = text;
      $('outcome').hidden = false;
      $('outcome-title').tabIndex = -1;
      $('outcome-title').focus();
    };
    if (!loginId || !state) return outcome('This link is incomplete', 'Run svc login again and open the address it prints.');
    const me = await signedIn();
    if (!me) return;
    let info;
    try {
      info = await api('GET', `/cli/auth/info?${new URLSearchParams({ loginId })}`);
    } catch (err) {
      if (err.status === 404) return outcome('Login request not found', 'It may have expired. Run svc login again.');
      return showError(err);
    }
    if (info.status !== 'pending')
      return outcome('This login request is no longer waiting', `Its status is ${info.status}. Run svc login again if you need to.`);
    $('code').textContent = info.verificationCode;
    $('cli-version').textContent = info.cliVersion || 'unknown';
    $('platform').textContent = info.platform || 'unknown';
    $('account').textContent = `${me.user.email} (${me.tenant.name})`;
    $('expires').textContent = when(info.expiresAt);
    $('request').hidden = false;
    const decide = (approve) => async () => {
      $('approve').disabled = $('deny').disabled = true;
      try {
        await api('POST', approve ? '/cli/auth/complete' : '/cli/auth/deny', { loginId, state });
        if (approve)
          outcome(
            'CLI login approved',
            `The CLI is now signed in as ${me.user.email}. You can close this page and return to your terminal.`,
          );
        else outcome('CLI login denied', 'The CLI was not signed in. You can close this page and return to your terminal.');
      } catch (err) {
        $('approve').disabled = $('deny').disabled = false;
        if (err.status === 409) outcome('This login request is no longer waiting', 'It expired or was already used. Run svc login again.');
        else showError(err);
      }
    };
    $('approve').addEventListener('click', decide(true));
    $('deny').addEventListener('click', decide(false));
  },
};

async function main() {
  const out = $('sign-out');
  if (out)
    out.addEventListener('click', async () => {
      await api('POST', '/auth/logout').catch(() => undefined);
      location.assign('/login');
    });
  try {
    await pages[document.body.dataset.page]?.();
  } catch (err) {
    showError(err);
  }
}

void main();
