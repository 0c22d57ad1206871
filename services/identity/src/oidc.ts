/**
 * OpenID Connect relying party: discovery, ID token verification through the issuer's JWKS (jose), and the
 * authorization-code exchange with PKCE. Issuers come from the operator's configuration, never from a request.
 */
import { createRemoteJWKSet, jwtVerify, type JWTPayload } from 'jose';
import { AppError, errors } from '@svc/kit';

export interface OAuthClient {
  issuer: string;
  clientId: string;
  clientSecret: string;
}

interface Discovery {
  issuer: string;
  authorization_endpoint: string;
  token_endpoint: string;
  jwks_uri: string;
}

export interface ExternalIdentity {
  subject: string;
  email: string;
  name: string;
}

const DISCOVERY_TTL_MS = 3600_000;
const TIMEOUT_MS = 10_000;

/** The provider failing to answer is a 503, never a 500 (and never its body, which may echo secrets). */
function unavailable(what: string): AppError {
  return errors.unavailable(`The identity provider did not answer (${what}); try again`, { reason: 'identity_provider_unavailable' });
}

export class OidcIssuer {
  private discovery: { at: number; doc: Promise<Discovery> } | null = null;
  private jwks: ReturnType<typeof createRemoteJWKSet> | null = null;

  constructor(readonly issuer: string) {}

  async metadata(): Promise<Discovery> {
    if (!this.discovery || Date.now() - this.discovery.at > DISCOVERY_TTL_MS) {
      const doc = this.fetchDiscovery();
      this.discovery = { at: Date.now(), doc };
      doc.catch(() => (this.discovery = null)); // a failed fetch is retried by the next request
    }
    return this.discovery.doc;
  }

  private async fetchDiscovery(): Promise<Discovery> {
    const url = `${this.issuer.replace(/\/$/, '')}/.well-known/openid-configuration`;
    let doc: Discovery;
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(TIMEOUT_MS) });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      doc = (await res.json()) as Discovery;
    } catch {
      throw unavailable('discovery');
    }
    // OpenID Connect Discovery 4.3: the document must name the issuer it was fetched for.
    if (doc.issuer !== this.issuer) throw unavailable('discovery names another issuer');
    return doc;
  }

  /** Verifies an ID token: signature (the issuer's JWKS), iss, aud, exp, and the nonce when one was sent. */
  async verify(token: string, audience: string, nonce?: string): Promise<ExternalIdentity> {
    const meta = await this.metadata();
    this.jwks ??= createRemoteJWKSet(new URL(meta.jwks_uri), { timeoutDuration: TIMEOUT_MS });
    let claims: JWTPayload;
    try {
      ({ payload: claims } = await jwtVerify(token, this.jwks, {
        issuer: this.issuer,
        audience,
        algorithms: ['RS256', 'ES256', 'EdDSA', 'PS256'],
        clockTolerance: 30,
      }));
    } catch (err) {
      if ((err as { code?: string }).code === 'ERR_JWKS_TIMEOUT') throw unavailable('keys');
      throw errors.unauthorized('The identity token is not valid');
    }
    if (nonce !== undefined && claims.nonce !== nonce) throw errors.unauthorized('The identity token is not valid');
    const email = typeof claims.email === 'string' ? claims.email.trim().toLowerCase() : '';
    // Only a verified email may name one of our users (an unverified one could be anybody's).
    if (!email || claims.email_verified !== true)
      throw new AppError('UNAUTHORIZED', 'The identity provider did not vouch for an email address', { reason: 'email_not_verified' });
    const name = typeof claims.name === 'string' && claims.name.trim() ? claims.name.trim().slice(0, 200) : email.split('@')[0];
    return { subject: String(claims.sub ?? ''), email, name };
  }

  /** The authorization-code grant (client_secret_basic, PKCE): answers the ID token. */
  async redeemCode(client: OAuthClient, code: string, redirectUri: string, codeVerifier: string): Promise<string> {
    const meta = await this.metadata();
    const body = new URLSearchParams({ grant_type: 'authorization_code', code, redirect_uri: redirectUri, code_verifier: codeVerifier });
    const basic = Buffer.from(`${encodeURIComponent(client.clientId)}:${encodeURIComponent(client.clientSecret)}`).toString('base64');
    let res: Response;
    try {
      res = await fetch(meta.token_endpoint, {
        method: 'POST',
        headers: { authorization: `Basic ${basic}`, 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
        body,
        signal: AbortSignal.timeout(TIMEOUT_MS),
      });
    } catch {
      throw unavailable('token endpoint');
    }
    const json = (await res.json().catch(() => ({}))) as { id_token?: string; error?: string };
    if (res.status >= 500) throw unavailable('token endpoint');
    // invalid_grant and friends: the code is wrong, used or expired (the user starts again).
    if (!res.ok || !json.id_token)
      throw errors.badRequest('invalid_grant', 'The identity provider refused the authorization code', {
        providerError: String(json.error ?? res.status).slice(0, 64),
      });
    return json.id_token;
  }
}

/**
 * OAUTH_PROVIDERS: a JSON object, provider name -> {issuer, clientId, clientSecret}, e.g.
 * `{"acme":{"issuer":"https://id.acme.example","clientId":"svc","clientSecret":"..."}}`. A bad value stops the
 * start-up with a message naming the setting (never its content: it holds secrets).
 */
export function parseOAuthProviders(raw: string | undefined): Record<string, OAuthClient> {
  if (!raw) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw new Error('OAUTH_PROVIDERS must be a JSON object: {"name": {"issuer", "clientId", "clientSecret"}}');
  }
  const out: Record<string, OAuthClient> = {};
  for (const [name, p] of Object.entries((parsed ?? {}) as Record<string, Partial<OAuthClient>>)) {
    if (!/^[a-z0-9-]{1,40}$/.test(name))
      throw new Error(`OAUTH_PROVIDERS: provider names are 1-40 of a-z, 0-9 and - (got ${JSON.stringify(name.slice(0, 40))})`);
    if (
      typeof p?.issuer !== 'string' ||
      !/^https?:\/\//.test(p.issuer) ||
      typeof p.clientId !== 'string' ||
      typeof p.clientSecret !== 'string'
    )
      throw new Error(`OAUTH_PROVIDERS.${name} needs issuer (an http(s) URL), clientId and clientSecret`);
    out[name] = { issuer: p.issuer, clientId: p.clientId, clientSecret: p.clientSecret };
  }
  return out;
}
