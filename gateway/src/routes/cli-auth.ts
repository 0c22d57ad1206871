import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { GatewayDeps } from '../deps';
import { route } from '../lib/route';
import { Obj, Str, Tenant, Timestamp, User } from '../schemas';

const Status = Type.Union(['pending', 'approved', 'expired', 'consumed'].map((s) => Type.Literal(s)));
const LoginQuery = Obj({ loginId: Str(1, 100) });
const Decision = Obj({ loginId: Str(1, 100), state: Str(1, 128) });

/** CLI login (spec 3, 4.8; CONTRACT.md 4). Not rate limited (auth routes); the login id is the polling secret. */
export function cliAuthRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { identity } = deps.clients;

  route(app, {
    method: 'POST',
    url: '/api/v1/cli/auth/start',
    operationId: 'startCliLogin',
    access: 'public',
    tag: 'cli-auth',
    summary: 'Start a CLI login: a login id, the browser address and the code to compare',
    status: 201,
    body: Obj({
      state: Str(1, 128),
      codeChallenge: Str(1, 128),
      codeChallengeMethod: Str(1, 20),
      cliVersion: Str(1, 50),
      platform: Str(1, 100),
    }),
    response: Obj({
      loginId: Type.String(),
      authUrl: Type.String(),
      verificationCode: Type.String(),
      expiresAt: Timestamp,
      interval: Type.Integer(),
    }),
    handler: async ({ body, call }) => {
      const res = await identity.startCliLogin(body, call);
      const authUrl = new URL('/cli/login', deps.config.publicUrl);
      authUrl.searchParams.set('loginId', res.loginId);
      authUrl.searchParams.set('state', body.state);
      return {
        loginId: res.loginId,
        authUrl: authUrl.toString(),
        verificationCode: res.verificationCode,
        expiresAt: res.expiresAt,
        interval: res.interval,
      };
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/cli/auth/status',
    operationId: 'getCliLoginStatus',
    access: 'public',
    tag: 'cli-auth',
    summary: "A CLI login's status (poll at the interval given by start)",
    query: LoginQuery,
    response: Obj({ status: Status }),
    handler: async ({ query, call }) => ({ status: (await identity.getCliLogin({ loginId: query.loginId }, call)).status }),
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/cli/auth/info',
    operationId: 'getCliLoginInfo',
    access: 'public',
    tag: 'cli-auth',
    summary: 'What the approval page shows: the verification code, CLI version and platform',
    query: LoginQuery,
    response: Obj({
      verificationCode: Type.String(),
      cliVersion: Type.String(),
      platform: Type.String(),
      status: Status,
      expiresAt: Timestamp,
    }),
    handler: async ({ query, call }) => {
      const r = await identity.getCliLogin({ loginId: query.loginId }, call);
      return {
        verificationCode: r.verificationCode,
        cliVersion: r.cliVersion,
        platform: r.platform,
        status: r.status,
        expiresAt: r.expiresAt,
      };
    },
  });

  for (const [verb, approve] of [
    ['complete', true],
    ['deny', false],
  ] as const)
    route(app, {
      method: 'POST',
      url: `/api/v1/cli/auth/${verb}`,
      operationId: approve ? 'completeCliLogin' : 'denyCliLogin',
      access: 'authenticated',
      tag: 'cli-auth',
      summary: approve ? 'Approve a pending CLI login (signed-in user)' : 'Deny a pending CLI login (signed-in user); it becomes expired',
      body: Decision,
      response: Obj({ status: Status }),
      handler: async ({ body, call }) => ({ status: (await identity.decideCliLogin({ ...body, approve }, call)).status }),
    });

  route(app, {
    method: 'POST',
    url: '/api/v1/cli/auth/token',
    operationId: 'exchangeCliLogin',
    access: 'public',
    tag: 'cli-auth',
    summary: 'Exchange an approved CLI login and its code verifier for a token (once)',
    body: Obj({ loginId: Str(1, 100), codeVerifier: Str(1, 200) }),
    response: Obj({ token: Type.String(), user: User, tenant: Tenant, refreshToken: Type.String(), expiresIn: Type.Integer() }),
    handler: async ({ body, call }) => {
      const r = await identity.exchangeCliLogin(body, call);
      return {
        token: r.tokens!.accessToken,
        user: { ...r.user!, role: r.role },
        tenant: r.tenant!,
        refreshToken: r.tokens!.refreshToken,
        expiresIn: r.tokens!.expiresIn,
      };
    },
  });
}
