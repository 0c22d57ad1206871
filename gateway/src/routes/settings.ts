import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { identityV1 } from '@svc/proto';
import type { GatewayDeps } from '../app';
import { route } from '../lib/route';
import { Nullable, Obj, Str } from '../schemas';

const Provider = Type.Union(['openai', 'anthropic', 'openai-compatible'].map((p) => Type.Literal(p)));

const LlmSettings = Obj({
  provider: Nullable(Provider),
  model: Nullable(Type.String()),
  baseUrl: Nullable(Type.String()),
  apiKeySet: Type.Boolean(),
  temperature: Nullable(Type.Number()),
  maxTokens: Nullable(Type.Integer()),
  source: Type.Union(
    ['tenant', 'platform', 'none'].map((s) => Type.Literal(s)),
    { description: 'where the effective settings come from' },
  ),
  updatedAt: Nullable(Type.String()),
});

/** The API key is write-only: only whether one is set is ever shown. */
function view(s: identityV1.LlmSettings) {
  return {
    provider: s.provider || null,
    model: s.model || null,
    baseUrl: s.baseUrl || null,
    apiKeySet: s.apiKeySet,
    temperature: s.temperature ?? null,
    maxTokens: s.maxTokens ?? null,
    source: s.source,
    updatedAt: s.updatedAt || null,
  };
}

export function settingsRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { identity } = deps.clients;

  route(app, {
    method: 'GET',
    url: '/api/v1/tenant/settings/llm',
    operationId: 'getLlmSettings',
    access: 'unscoped',
    tag: 'tenant',
    summary: "The tenant's LLM settings (the platform default when it has none)",
    response: LlmSettings,
    handler: async ({ call }) => view((await identity.getLlmSettings({}, call)).settings!),
  });

  route(app, {
    method: 'PATCH',
    url: '/api/v1/tenant/settings/llm',
    operationId: 'updateLlmSettings',
    access: 'manager',
    tag: 'tenant',
    summary: 'Change LLM settings; null clears a field. apiKey is stored encrypted and never returned',
    body: Obj({
      provider: Type.Optional(Provider),
      model: Type.Optional(Str(1, 200)),
      baseUrl: Type.Optional(Nullable(Str(1, 2000))),
      apiKey: Type.Optional(Nullable(Str(1, 1000))),
      temperature: Type.Optional(Nullable(Type.Number({ minimum: 0, maximum: 2 }))),
      maxTokens: Type.Optional(Nullable(Type.Integer({ minimum: 1, maximum: 200000 }))),
    }),
    response: LlmSettings,
    handler: async ({ body, call }) => {
      const res = await identity.updateLlmSettings(
        {
          provider: body.provider,
          model: body.model,
          baseUrl: body.baseUrl ?? undefined,
          apiKey: body.apiKey ?? undefined,
          temperature: body.temperature ?? undefined,
          maxTokens: body.maxTokens ?? undefined,
          clearBaseUrl: body.baseUrl === null,
          clearApiKey: body.apiKey === null,
          clearTemperature: body.temperature === null,
          clearMaxTokens: body.maxTokens === null,
        },
        call,
      );
      return view(res.settings!);
    },
  });
}
