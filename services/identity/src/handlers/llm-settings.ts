import { type CallContext, checkUrlShape, EgressError, type EgressPolicy, errors, type FieldError, nowIso } from '@svc/kit';
import type { identityV1 } from '@svc/proto';
import { llmSettings, type LlmSettingsDoc } from '../collections';
import type { IdentityDeps } from '../context';
import { requireAuth } from './auth';
import { requireManager } from './team';

export const LLM_PROVIDERS = ['openai', 'anthropic', 'openai-compatible'] as const;

/**
 * A base URL the egress guard accepts in shape: http(s), no credentials, and an IP literal only in ranges it may
 * reach (so a reserved or internal address is refused when saved, as webhook URLs are). A host name's addresses are
 * checked by the guard at every connection.
 */
function checkBaseUrl(value: string, fields: FieldError[], policy: EgressPolicy): string {
  try {
    checkUrlShape(value, policy);
  } catch (err) {
    if (!(err instanceof EgressError)) throw err;
    fields.push({ field: 'baseUrl', message: err.message });
  }
  return value.replace(/\/+$/, '');
}

export function llmSettingsHandlers(deps: IdentityDeps) {
  const col = deps.store.collection(llmSettings);
  const platform = deps.settings.platformLlm;

  function view(doc: LlmSettingsDoc | null): identityV1.LlmSettings {
    if (doc)
      return {
        provider: doc.provider,
        model: doc.model,
        baseUrl: doc.baseUrl ?? '',
        apiKeySet: doc.apiKeySealed !== null,
        temperature: doc.temperature ?? undefined,
        maxTokens: doc.maxTokens ?? undefined,
        source: 'tenant',
        updatedAt: doc.updatedAt,
      };
    if (platform)
      return {
        provider: platform.provider,
        model: platform.model,
        baseUrl: platform.baseUrl ?? '',
        apiKeySet: platform.apiKey !== null,
        source: 'platform',
        updatedAt: '',
      };
    return { provider: '', model: '', baseUrl: '', apiKeySet: false, source: 'none', updatedAt: '' };
  }

  return {
    async getLlmSettings(_req: identityV1.GetLlmSettingsRequest, ctx: CallContext): Promise<identityV1.GetLlmSettingsResponse> {
      requireAuth(ctx);
      return { settings: view(await col.get(ctx.auth.tid)) };
    },

    async updateLlmSettings(req: identityV1.UpdateLlmSettingsRequest, ctx: CallContext): Promise<identityV1.UpdateLlmSettingsResponse> {
      const auth = requireManager(ctx);
      const current = await col.get(auth.tid);
      const fields: FieldError[] = [];
      const provider = req.provider ?? current?.provider;
      const model = req.model?.trim() ?? current?.model;
      let baseUrl = req.clearBaseUrl
        ? null
        : req.baseUrl !== undefined
          ? checkBaseUrl(req.baseUrl, fields, deps.egress)
          : (current?.baseUrl ?? null);
      if (baseUrl === '') baseUrl = null;
      if (!provider) fields.push({ field: 'provider', message: 'is required' });
      else if (!(LLM_PROVIDERS as readonly string[]).includes(provider))
        fields.push({ field: 'provider', message: `must be one of: ${LLM_PROVIDERS.join(', ')}` });
      if (!model) fields.push({ field: 'model', message: 'is required' });
      else if (model.length > 200) fields.push({ field: 'model', message: 'must be at most 200 characters' });
      if (provider === 'openai-compatible' && !baseUrl)
        fields.push({ field: 'baseUrl', message: 'is required for openai-compatible providers' });
      if (req.temperature !== undefined && !(req.temperature >= 0 && req.temperature <= 2))
        fields.push({ field: 'temperature', message: 'must be between 0 and 2' });
      if (req.maxTokens !== undefined && !(req.maxTokens >= 1 && req.maxTokens <= 200_000))
        fields.push({ field: 'maxTokens', message: 'must be between 1 and 200000' });
      if (req.apiKey !== undefined && (req.apiKey.length < 1 || req.apiKey.length > 1000))
        fields.push({ field: 'apiKey', message: 'must be 1 to 1000 characters' });
      if (fields.length) throw errors.validation(fields);
      const now = nowIso();
      const doc: LlmSettingsDoc = {
        id: auth.tid,
        provider: provider!,
        model: model!,
        baseUrl,
        apiKeySealed: req.clearApiKey ? null : req.apiKey !== undefined ? deps.box.encrypt(req.apiKey) : (current?.apiKeySealed ?? null),
        temperature: req.clearTemperature ? null : (req.temperature ?? current?.temperature ?? null),
        maxTokens: req.clearMaxTokens ? null : (req.maxTokens ?? current?.maxTokens ?? null),
        createdAt: current?.createdAt ?? now,
        updatedAt: now,
      };
      if (current) await col.update(auth.tid, {}, doc);
      else await col.insert(doc);
      return { settings: view(doc) };
    },

    async resolveLlmSettings(_req: identityV1.ResolveLlmSettingsRequest, ctx: CallContext): Promise<identityV1.ResolveLlmSettingsResponse> {
      requireAuth(ctx);
      const doc = await col.get(ctx.auth.tid);
      if (doc)
        return {
          settings: {
            provider: doc.provider,
            model: doc.model,
            baseUrl: doc.baseUrl ?? '',
            apiKey: doc.apiKeySealed ? deps.box.decrypt(doc.apiKeySealed) : '',
            temperature: doc.temperature ?? undefined,
            maxTokens: doc.maxTokens ?? undefined,
            source: 'tenant',
          },
        };
      if (platform)
        return {
          settings: {
            provider: platform.provider,
            model: platform.model,
            baseUrl: platform.baseUrl ?? '',
            apiKey: platform.apiKey ?? '',
            source: 'platform',
          },
        };
      throw errors.badRequest('llm_not_configured', 'No LLM is configured: set one with PATCH /api/v1/tenant/settings/llm');
    },
  };
}
