/**
 * External sign-in (spec 5.12, CONTRACT.md 3): `POST /auth/exchange` with a token of the OpenID provider of
 * OIDC_ISSUER, and the OAuth authorization-code flow (state, PKCE S256, nonce) for the providers of OAUTH_PROVIDERS.
 * A verified email signs in the user who has it; an email not seen before gets a new tenant and owner.
 */
import { createHash, randomBytes } from 'node:crypto';
import { type CallContext, DuplicateKeyError, errors, nowIso, sha256Hex } from '@svc/kit';
import type { identityV1 } from '@svc/proto';
import { oauthStates, tenants, users } from '../collections';
import type { IdentityDeps } from '../context';
import { OidcIssuer, type ExternalIdentity, type OAuthClient } from '../oidc';
import { startSession } from '../tokens';
import { createTenantWithOwner, ownerOfNewTenant, signedIn } from './auth';
import { joinWithInvitation, pendingInvitation } from './invitations';
import { toTenant, toUser } from '../views';

export interface ExternalAuthSettings {
  /** POST /auth/exchange: the issuer whose tokens are accepted, and the audience they must name. */
  exchange: { issuer: string; audience: string } | null;
  /** Named OpenID Connect providers for the OAuth flow. */
  oauth: Record<string, OAuthClient>;
}

const STATE_TTL_MS = 10 * 60_000;

/** What a state seals: provider, PKCE verifier, nonce, redirect URI, expiry (epoch ms), an invitation's token. */
interface OAuthFlow {
  p: string;
  v: string;
  n: string;
  r: string;
  e: number;
  i?: string;
}
/** A password hash no password matches: users who sign in through a provider have none until they set one. */
const NO_PASSWORD = 'external';

export function externalAuthHandlers(deps: IdentityDeps, settings: ExternalAuthSettings) {
  const { store } = deps;
  const issuers = new Map<string, OidcIssuer>();
  const issuerFor = (url: string) => {
    let issuer = issuers.get(url);
    if (!issuer) issuers.set(url, (issuer = new OidcIssuer(url)));
    return issuer;
  };
  const openState = (state: string): OAuthFlow | null => {
    try {
      if (!state || state.length > 4096) return null;
      return JSON.parse(deps.box.decrypt(Buffer.from(state, 'base64url').toString())) as OAuthFlow;
    } catch {
      return null; // not sealed by us, or tampered with
    }
  };
  const provider = (name: string): OAuthClient => {
    const p = Object.hasOwn(settings.oauth, name) ? settings.oauth[name] : undefined;
    if (!p) throw errors.notFound('oauth_provider', name.slice(0, 64));
    return p;
  };

  /** Signs in the user with this verified email, or creates their tenant; concurrent first sign-ins make one. */
  async function signIn(who: ExternalIdentity, ctx: CallContext): Promise<identityV1.ExchangeExternalTokenResponse> {
    for (let attempt = 0; ; attempt++) {
      const user = await store.collection(users).findOne({ email: who.email });
      if (user) {
        if (user.disabled) throw errors.forbidden('Account is disabled', { reason: 'account_disabled' });
        const tenant = await store.collection(tenants).get(user.tenantId);
        if (!tenant) throw errors.unauthorized('The identity token is not valid');
        const { tokens } = await store.transaction(async (tx) => {
          const started = await startSession(deps, tx, user);
          await signedIn(tx, ctx, user, started.session.id, 'external');
          return started;
        });
        deps.audit.kick();
        return { user: toUser(user), tenant: toTenant(tenant), role: user.role, tokens };
      }
      const fresh = ownerOfNewTenant({ email: who.email, name: who.name, tenantName: who.name, passwordHash: NO_PASSWORD });
      try {
        const { tokens } = await store.transaction(async (tx) => {
          await createTenantWithOwner(tx, fresh.tenant, fresh.user);
          return startSession(deps, tx, fresh.user);
        });
        deps.relay.notify();
        return { user: toUser(fresh.user), tenant: toTenant(fresh.tenant), role: fresh.user.role, tokens };
      } catch (err) {
        // Another request registered this email first: sign in as that user.
        if (!(err instanceof DuplicateKeyError) || attempt >= 2) throw err;
      }
    }
  }

  /**
   * Accepts the invitation sealed in the state as the provider's user: only when the provider's verified email is
   * the invited address (the link may have been forwarded; the provider proves who signs in).
   */
  async function join(token: string, who: ExternalIdentity, ctx: CallContext): Promise<identityV1.CompleteOAuthResponse> {
    const invitation = await pendingInvitation(deps, token);
    if (who.email.toLowerCase() !== invitation.email.toLowerCase())
      throw errors.forbidden(`This invitation is for another email address than ${who.email}: sign in as the invited one`, {
        reason: 'invitation_email_mismatch',
      });
    return joinWithInvitation(deps, ctx, invitation, { name: who.name, passwordHash: NO_PASSWORD, method: 'external' });
  }

  return {
    async exchangeExternalToken(
      req: identityV1.ExchangeExternalTokenRequest,
      ctx: CallContext,
    ): Promise<identityV1.ExchangeExternalTokenResponse> {
      if (!settings.exchange) throw errors.notFound('identity_provider', 'oidc');
      if (!req.token || req.token.length > 16_384) throw errors.validation([{ field: 'token', message: 'must be a JWT' }]);
      return signIn(await issuerFor(settings.exchange.issuer).verify(req.token, settings.exchange.audience), ctx);
    },

    async listOAuthProviders(): Promise<identityV1.ListOAuthProvidersResponse> {
      return { providers: Object.keys(settings.oauth).sort() };
    },

    async startOAuth(req: identityV1.StartOAuthRequest): Promise<identityV1.StartOAuthResponse> {
      const client = provider(req.provider);
      // A link already used, revoked or expired is refused now, before the visitor goes to the provider.
      if (req.invitationToken) await pendingInvitation(deps, req.invitationToken);
      const meta = await issuerFor(client.issuer).metadata();
      const codeVerifier = randomBytes(32).toString('base64url');
      const nonce = randomBytes(16).toString('base64url');
      // The state carries what the callback needs, sealed (AES-GCM with the master key): nothing is stored per
      // start, so unauthenticated starts cannot fill the store.
      const flow: OAuthFlow = { p: req.provider, v: codeVerifier, n: nonce, r: req.redirectUri, e: Date.now() + STATE_TTL_MS };
      if (req.invitationToken) flow.i = req.invitationToken;
      const state = Buffer.from(deps.box.encrypt(JSON.stringify(flow))).toString('base64url');
      const url = new URL(meta.authorization_endpoint);
      url.search = new URLSearchParams({
        response_type: 'code',
        client_id: client.clientId,
        redirect_uri: req.redirectUri,
        scope: 'openid email profile',
        state,
        nonce,
        code_challenge: createHash('sha256').update(codeVerifier).digest('base64url'),
        code_challenge_method: 'S256',
      }).toString();
      return { url: url.toString() };
    },

    async completeOAuth(req: identityV1.CompleteOAuthRequest, ctx: CallContext): Promise<identityV1.CompleteOAuthResponse> {
      const client = provider(req.provider);
      if (!req.code || req.code.length > 2048) throw errors.validation([{ field: 'code', message: 'must be 1 to 2048 characters' }]);
      const flow = openState(req.state);
      if (!flow || flow.p !== req.provider) throw errors.badRequest('invalid_state', 'Unknown sign-in state: start again');
      if (flow.e < Date.now()) throw errors.badRequest('expired_state', 'This sign-in took too long: start again');
      const issuer = issuerFor(client.issuer);
      // The provider redeems a code once; only then is the state marked used (so only real sign-ins are stored).
      const idToken = await issuer.redeemCode(client, req.code, flow.r, flow.v);
      const who = await issuer.verify(idToken, client.clientId, flow.n);
      try {
        await store.collection(oauthStates).insert({ id: sha256Hex(req.state), expiresAtMs: flow.e, createdAt: nowIso() });
      } catch (err) {
        if (err instanceof DuplicateKeyError) throw errors.badRequest('invalid_state', 'This sign-in was already completed: start again');
        throw err;
      }
      return flow.i ? join(flow.i, who, ctx) : signIn(who, ctx);
    },
  };
}
