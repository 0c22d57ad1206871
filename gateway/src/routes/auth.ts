import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { identityV1 } from '@svc/proto';
import type { GatewayDeps } from '../deps';
import { route } from '../lib/route';
import { SESSION_COOKIE } from '../plugins/authenticate';
import { Obj, Str, Tenant, User } from '../schemas';

const SignedIn = Obj({ user: User, tenant: Tenant, accessToken: Type.String(), refreshToken: Type.String(), expiresIn: Type.Integer() });

type SignInAnswer =
  | identityV1.RegisterResponse
  | identityV1.LoginResponse
  | identityV1.RefreshResponse
  | identityV1.ExchangeExternalTokenResponse
  | identityV1.CompleteOAuthResponse;

const ProviderParams = Obj({ provider: Type.String({ pattern: '^[a-z0-9-]{1,40}$' }) });

export function authRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { identity } = deps.clients;
  const secure = deps.config.publicUrl.startsWith('https:');
  const sessionMaxAge = 30 * 86400;

  function setSessionCookie(reply: FastifyReply, value: string, maxAge: number) {
    const attrs = [`${SESSION_COOKIE}=${value}`, 'Path=/', 'HttpOnly', 'SameSite=Lax', `Max-Age=${maxAge}`];
    if (secure) attrs.push('Secure');
    reply.header('Set-Cookie', attrs.join('; '));
  }

  function signedIn(res: SignInAnswer, reply: FastifyReply) {
    if (res.tokens!.sessionToken) setSessionCookie(reply, res.tokens!.sessionToken, sessionMaxAge);
    return {
      user: { ...res.user!, role: res.role },
      tenant: res.tenant!,
      accessToken: res.tokens!.accessToken,
      refreshToken: res.tokens!.refreshToken,
      expiresIn: res.tokens!.expiresIn,
    };
  }

  route(app, {
    method: 'POST',
    url: '/api/v1/auth/register',
    operationId: 'register',
    access: 'public',
    tag: 'auth',
    summary: 'Create a tenant and its owner, and sign in',
    status: 201,
    body: Obj({ email: Str(3, 254), password: Str(8, 200), name: Str(1, 200), tenantName: Str(1, 200) }),
    response: SignedIn,
    handler: async ({ body, call, reply }) => signedIn(await identity.register(body, call), reply),
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/auth/login',
    operationId: 'login',
    access: 'public',
    tag: 'auth',
    summary: 'Sign in with email and password',
    body: Obj({ email: Str(1, 254), password: Str(1, 200) }),
    response: SignedIn,
    handler: async ({ body, call, reply }) => signedIn(await identity.login(body, call), reply),
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/auth/refresh',
    operationId: 'refresh',
    access: 'public',
    tag: 'auth',
    summary: 'Exchange a refresh token for a new pair (the old one stops working)',
    body: Obj({ refreshToken: Str(1, 200) }),
    response: SignedIn,
    handler: async ({ body, call, reply }) => signedIn(await identity.refresh({ refreshToken: body.refreshToken }, call), reply),
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/auth/logout',
    operationId: 'logout',
    access: 'authenticated',
    tag: 'auth',
    summary: 'End the current session: its refresh token, access tokens and cookie',
    response: Obj({ loggedOut: Type.Boolean() }),
    handler: async ({ call, reply }) => {
      await identity.logout({}, call);
      setSessionCookie(reply, '', 0);
      return { loggedOut: true };
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/auth/me',
    operationId: 'me',
    access: 'authenticated',
    tag: 'auth',
    summary: 'The caller: user, tenant, role and credential',
    response: Obj({
      user: User,
      tenant: Tenant,
      role: Type.String(),
      credential: Obj({
        type: Type.String(),
        id: Type.String(),
        environment: Type.Optional(Type.String()),
        scopes: Type.Optional(Type.Array(Type.String())),
      }),
    }),
    handler: async ({ call }) => {
      const me = await identity.getMe({}, call);
      const c = me.credential!;
      return {
        user: { ...me.user!, role: me.role },
        tenant: me.tenant!,
        role: me.role,
        credential: {
          type: c.type,
          id: c.id,
          ...(c.environment !== undefined ? { environment: c.environment } : {}),
          ...(c.scoped ? { scopes: c.scopes } : {}),
        },
      };
    },
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/auth/exchange',
    operationId: 'exchangeToken',
    access: 'public',
    tag: 'auth',
    summary: 'Sign in with a token of the configured OpenID provider (OIDC_ISSUER): an access token for this session',
    body: Obj({ token: Str(1, 16_384) }),
    response: Obj({ accessToken: Type.String(), expiresIn: Type.Integer(), tokenType: Type.Literal('Bearer') }),
    handler: async ({ body, call, reply }) => {
      const done = signedIn(await identity.exchangeExternalToken({ token: body.token }, call), reply);
      return { accessToken: done.accessToken, expiresIn: done.expiresIn, tokenType: 'Bearer' as const };
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/oauth/providers',
    operationId: 'listOAuthProviders',
    access: 'public',
    tag: 'auth',
    summary: 'The names of the configured OpenID Connect providers (OAUTH_PROVIDERS), for sign-in buttons',
    response: Obj({ providers: Type.Array(Type.String()) }),
    handler: async ({ call }) => identity.listOAuthProviders({}, call),
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/oauth/:provider/start',
    operationId: 'startOAuth',
    access: 'public',
    tag: 'auth',
    summary: "The provider's authorization address (state, PKCE S256 and nonce included); the browser goes there",
    description:
      "With `invitation` (an invitation link's token) the sign-in accepts that invitation: the provider's verified email " +
      'must be the invited address (else 403 `invitation_email_mismatch`); a used, revoked or expired invitation is 410 ' +
      '`invitation_not_valid`, here or when the sign-in completes.',
    params: ProviderParams,
    query: Obj({ invitation: Type.Optional(Str(20, 200)) }),
    response: Obj({ url: Type.String() }),
    handler: async ({ params, query, call }) =>
      identity.startOAuth(
        {
          provider: params.provider,
          redirectUri: new URL(`/oauth/${params.provider}/callback`, deps.config.publicUrl).toString(),
          invitationToken: query.invitation ?? '',
        },
        call,
      ),
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/oauth/:provider/authorize',
    operationId: 'authorizeOAuth',
    access: 'public',
    tag: 'auth',
    summary: "Complete the sign-in with the provider's code and the state from start (like login: tokens and the cookie)",
    params: ProviderParams,
    body: Obj({ code: Str(1, 2048), state: Str(1, 4096) }),
    response: SignedIn,
    handler: async ({ params, body, call, reply }) =>
      signedIn(await identity.completeOAuth({ provider: params.provider, code: body.code, state: body.state }, call), reply),
  });

  // Accounts (CONTRACT.md 13): the emailed one-time links land here through the console's pages.
  const Token = Str(20, 200);

  route(app, {
    method: 'POST',
    url: '/api/v1/auth/invitations/accept',
    operationId: 'acceptInvitation',
    access: 'public',
    tag: 'auth',
    summary: "Join a tenant with an invitation's token: set a name and password, and sign in (as login)",
    description: 'A used, revoked or expired invitation: 410 `GONE` with `details.reason = "invitation_not_valid"`.',
    body: Obj({ token: Token, name: Str(1, 200), password: Str(8, 200) }),
    response: SignedIn,
    handler: async ({ body, call, reply }) => signedIn(await identity.acceptInvitation(body, call), reply),
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/auth/password/forgot',
    operationId: 'forgotPassword',
    access: 'public',
    tag: 'auth',
    summary: 'Email a one-time password reset link to the address when an account has it (the answer is the same either way)',
    status: 202,
    body: Obj({ email: Str(1, 254) }),
    response: Obj({ accepted: Type.Boolean() }),
    handler: async ({ body, call }) => {
      await identity.forgotPassword(body, call);
      return { accepted: true };
    },
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/auth/password/reset',
    operationId: 'resetPassword',
    access: 'public',
    tag: 'auth',
    summary: "Set a new password with a reset link's token; every session and refresh token of the user ends",
    description: 'A used or expired token: 410 `GONE` with `details.reason = "token_not_valid"`.',
    body: Obj({ token: Token, password: Str(8, 200) }),
    response: Obj({ reset: Type.Boolean() }),
    handler: async ({ body, call }) => {
      await identity.resetPassword(body, call);
      return { reset: true };
    },
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/auth/email/verify',
    operationId: 'verifyEmail',
    access: 'public',
    tag: 'auth',
    summary: "Verify the account's email address with the token of the link sent at sign-up",
    description: 'A used or expired token: 410 `GONE` with `details.reason = "token_not_valid"`.',
    body: Obj({ token: Token }),
    response: Obj({ verified: Type.Boolean() }),
    handler: async ({ body, call }) => {
      await identity.verifyEmail(body, call);
      return { verified: true };
    },
  });
}
