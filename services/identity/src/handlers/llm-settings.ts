import { auditChange } from '../audit/log';
import { type CallContext, EgressError, type EgressPolicy, errors, type FieldError, nowIso, resolveAndCheck } from '@svc/kit';
import type { identityV1 } from '@svc/proto';
import { type LlmFallbackDoc, llmSettings, type LlmSettingsDoc } from '../collections';
import type { IdentityDeps } from '../context';
import { requireAuth } from './auth';
import { requireManager } from './team';

export const LLM_PROVIDERS = ['openai', 'anthropic', 'openai-compatible'] as const;

/** At most this many fallback models (CONTRACT.md 9). */
export const MAX_FALLBACKS = 5;

/**
 * A base URL the egress guard would let a call reach, judged when it is saved as webhook URLs are: http(s), no
 * credentials, and every address its host resolves to in ranges the guard allows (so `http://localhost.:PORT/v1` or a
 * name of this machine is refused now rather than at the first call). The guard checks the address again at every
 * connection, since what a name resolves to can change.
 */
async function checkBaseUrl(value: string, field: string, fields: FieldError[], policy: EgressPolicy): Promise<string> {
  try {
    await resolveAndCheck(value, policy);
  } catch (err) {
    if (!(err instanceof EgressError)) throw err;
    fields.push({ field, message: err.message });
  }
  return value.replace(/\/+$/, '');
}

function checkModel(model: string | undefined, field: string, fields: FieldError[]): void {
  if (!model) fields.push({ field, message: 'is required' });
  else if (model.length > 200) fields.push({ field, message: 'must be at most 200 characters' });
}

function checkProvider(provider: string | undefined, field: string, fields: FieldError[]): void {
  if (!provider) fields.push({ field, message: 'is required' });
  else if (!(LLM_PROVIDERS as readonly string[]).includes(provider))
    fields.push({ field, message: `must be one of: ${LLM_PROVIDERS.join(', ')}` });
}

const sameDeployment = (a: { provider: string; model: string; baseUrl: string | null }, b: typeof a) =>
  a.provider === b.provider && a.model === b.model && (a.baseUrl ?? null) === (b.baseUrl ?? null);

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
        fallbacks: (doc.fallbacks ?? []).map((f) => ({
          provider: f.provider,
          model: f.model,
          baseUrl: f.baseUrl ?? '',
          apiKeySet: f.apiKeySealed !== null,
        })),
      };
    if (platform)
      return {
        provider: platform.provider,
        model: platform.model,
        baseUrl: platform.baseUrl ?? '',
        apiKeySet: platform.apiKey !== null,
        source: 'platform',
        updatedAt: '',
        fallbacks: [],
      };
    return { provider: '', model: '', baseUrl: '', apiKeySet: false, source: 'none', updatedAt: '', fallbacks: [] };
  }

  /** The new fallback list: each entry checked, its key sealed, kept from the saved entry or cleared. */
  async function fallbacksOf(
    inputs: identityV1.LlmFallbackInput[],
    saved: LlmFallbackDoc[],
    fields: FieldError[],
  ): Promise<LlmFallbackDoc[]> {
    if (inputs.length > MAX_FALLBACKS) {
      fields.push({ field: 'fallbacks', message: `must have at most ${MAX_FALLBACKS} entries` });
      return [];
    }
    const out: LlmFallbackDoc[] = [];
    for (const [i, f] of inputs.entries()) {
      const at = `fallbacks[${i}]`;
      checkProvider(f.provider, `${at}.provider`, fields);
      const model = f.model.trim();
      checkModel(model, `${at}.model`, fields);
      const baseUrl = f.baseUrl ? await checkBaseUrl(f.baseUrl, `${at}.baseUrl`, fields, deps.egress) : null;
      if (f.provider === 'openai-compatible' && !baseUrl)
        fields.push({ field: `${at}.baseUrl`, message: 'is required for openai-compatible providers' });
      if (f.apiKey !== undefined && (f.apiKey.length < 1 || f.apiKey.length > 1000))
        fields.push({ field: `${at}.apiKey`, message: 'must be 1 to 1000 characters' });
      const entry = { provider: f.provider, model, baseUrl };
      const kept = saved.find((s) => sameDeployment(s, entry))?.apiKeySealed ?? null;
      out.push({
        ...entry,
        apiKeySealed: f.clearApiKey ? null : f.apiKey !== undefined ? deps.box.encrypt(f.apiKey) : kept,
      });
    }
    return out;
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
          ? await checkBaseUrl(req.baseUrl, 'baseUrl', fields, deps.egress)
          : (current?.baseUrl ?? null);
      if (baseUrl === '') baseUrl = null;
      checkProvider(provider, 'provider', fields);
      checkModel(model, 'model', fields);
      if (provider === 'openai-compatible' && !baseUrl)
        fields.push({ field: 'baseUrl', message: 'is required for openai-compatible providers' });
      if (req.temperature !== undefined && !(req.temperature >= 0 && req.temperature <= 2))
        fields.push({ field: 'temperature', message: 'must be between 0 and 2' });
      if (req.maxTokens !== undefined && !(req.maxTokens >= 1 && req.maxTokens <= 200_000))
        fields.push({ field: 'maxTokens', message: 'must be between 1 and 200000' });
      if (req.apiKey !== undefined && (req.apiKey.length < 1 || req.apiKey.length > 1000))
        fields.push({ field: 'apiKey', message: 'must be 1 to 1000 characters' });
      const saved = current?.fallbacks ?? [];
      const fallbacks = req.setFallbacks ? await fallbacksOf(req.fallbacks, saved, fields) : saved;
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
        fallbacks,
        createdAt: current?.createdAt ?? now,
        updatedAt: now,
      };
      await deps.store.transaction(async (tx) => {
        if (current) await tx.collection(llmSettings).update(auth.tid, {}, doc);
        else await tx.collection(llmSettings).insert(doc);
        await auditChange(
          tx,
          ctx,
          auth.tid,
          'llm_settings.changed',
          { type: 'llm_settings', id: auth.tid },
          {
            before: current ? llmAudit(current) : null,
            after: llmAudit(doc),
          },
        );
      });
      deps.audit.kick();
      return { settings: view(doc) };
    },

    async resolveLlmSettings(_req: identityV1.ResolveLlmSettingsRequest, ctx: CallContext): Promise<identityV1.ResolveLlmSettingsResponse> {
      requireAuth(ctx);
      const doc = await col.get(ctx.auth.tid);
      if (doc) {
        const apiKey = doc.apiKeySealed ? deps.box.decrypt(doc.apiKeySealed) : '';
        return {
          settings: {
            provider: doc.provider,
            model: doc.model,
            baseUrl: doc.baseUrl ?? '',
            apiKey,
            temperature: doc.temperature ?? undefined,
            maxTokens: doc.maxTokens ?? undefined,
            source: 'tenant',
            // An entry without its own key shares the main key only with the same provider at the same base URL:
            // a key is never sent to a server it was not given for.
            fallbacks: (doc.fallbacks ?? []).map((f) => ({
              provider: f.provider,
              model: f.model,
              baseUrl: f.baseUrl ?? '',
              apiKey: f.apiKeySealed
                ? deps.box.decrypt(f.apiKeySealed)
                : f.provider === doc.provider && (f.baseUrl ?? null) === (doc.baseUrl ?? null)
                  ? apiKey
                  : '',
            })),
          },
        };
      }
      if (platform)
        return {
          settings: {
            provider: platform.provider,
            model: platform.model,
            baseUrl: platform.baseUrl ?? '',
            apiKey: platform.apiKey ?? '',
            source: 'platform',
            fallbacks: [],
          },
        };
      throw errors.badRequest('llm_not_configured', 'No LLM is configured: set one with PATCH /api/v1/tenant/settings/llm');
    },
  };
}

/** What the audit log shows of LLM settings: whether keys are set, never a key. */
function llmAudit(doc: LlmSettingsDoc) {
  return {
    provider: doc.provider,
    model: doc.model,
    baseUrl: doc.baseUrl,
    hasApiKey: doc.apiKeySealed !== null,
    temperature: doc.temperature,
    maxTokens: doc.maxTokens,
    fallbacks: (doc.fallbacks ?? []).map((f) => ({
      provider: f.provider,
      model: f.model,
      baseUrl: f.baseUrl,
      hasApiKey: f.apiKeySealed !== null,
    })),
  };
}
