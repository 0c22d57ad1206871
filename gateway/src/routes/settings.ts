import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { identityV1 } from '@svc/proto';
import type { GatewayDeps } from '../deps';
import { route } from '../lib/route';
import { Nullable, Obj, Str } from '../schemas';

const Provider = Type.Union(['openai', 'anthropic', 'openai-compatible'].map((p) => Type.Literal(p)));

const Fallback = Obj({
  provider: Provider,
  model: Type.String(),
  baseUrl: Nullable(Type.String(), { description: "null: the provider's public API" }),
  apiKeySet: Type.Boolean(),
});

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
  fallbacks: Type.Array(Fallback, {
    description: 'Tried in order when the model fails before its first token (429, 5xx, timeout, refused or cut connection)',
  }),
});

const FallbackInput = Obj({
  provider: Provider,
  model: Str(1, 200),
  baseUrl: Type.Optional(Nullable(Str(1, 2000))),
  apiKey: Type.Optional(
    Nullable(Str(1, 1000), {
      description:
        'Write-only. Left out: the key of the saved entry with the same provider, model and base URL is kept; without one, ' +
        'the main key is used when the entry has the main provider and base URL. null: no key of its own',
    }),
  ),
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
    fallbacks: s.fallbacks.map((f) => ({ provider: f.provider, model: f.model, baseUrl: f.baseUrl || null, apiKeySet: f.apiKeySet })),
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
      fallbacks: Type.Optional(
        Nullable(Type.Array(FallbackInput, { maxItems: 5 }), { description: 'Replaces the list (at most 5); null or [] removes it' }),
      ),
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
          setFallbacks: body.fallbacks !== undefined,
          fallbacks: (body.fallbacks ?? []).map(
            (f: { provider: string; model: string; baseUrl?: string | null; apiKey?: string | null }) => ({
              provider: f.provider,
              model: f.model,
              baseUrl: f.baseUrl ?? '',
              apiKey: f.apiKey ?? undefined,
              clearApiKey: f.apiKey === null,
            }),
          ),
        },
        call,
      );
      return view(res.settings!);
    },
  });
}
