import { AnthropicProvider } from './anthropic';
import { BedrockProvider } from './bedrock';
import { GeminiProvider } from './gemini';
import { instrumented } from './instrumented';
import { OpenAIProvider } from './openai';
import { LlmError, type LlmProvider, type LlmSettings } from './types';

/**
 * The provider for one settings object (a tenant's or the platform's). Checks the settings at once: a missing key or
 * base URL, or a malformed one, throws an `LlmError` of kind `bad_request`. The instance holds no per-call state and
 * can be reused for any number of concurrent calls. Each call is traced and measured (instrumented.ts).
 */
export function createProvider(settings: LlmSettings): LlmProvider {
  return instrumented(adapterFor(settings), settings);
}

function adapterFor(settings: LlmSettings): LlmProvider {
  switch (settings.provider) {
    case 'openai':
    case 'openai-compatible':
    case 'azure-openai':
      return new OpenAIProvider(settings);
    case 'anthropic':
      return new AnthropicProvider(settings);
    case 'gemini':
      return new GeminiProvider(settings);
    case 'bedrock':
      return new BedrockProvider(settings);
    default:
      throw new LlmError('bad_request', `unknown LLM provider "${String((settings as { provider?: unknown }).provider)}"`);
  }
}

/** Providers by their settings, per transport (the caller's egress guard and its connection pool). */
const reused = new WeakMap<object, Map<string, LlmProvider>>();
const NO_TRANSPORT = {};
const REUSED_MAX = 1000;

/**
 * The provider for these settings, built once and then reused (building one resolves and checks its settings). Keyed by every setting's value, so a changed key, URL or model is a new provider at once:
 * nothing is ever served from stale settings. Bounded; refusals (bad settings) are thrown, never kept.
 */
export function reusedProvider(settings: LlmSettings): LlmProvider {
  const { transport, ...rest } = settings;
  let byKey = reused.get(transport ?? NO_TRANSPORT);
  if (!byKey) reused.set(transport ?? NO_TRANSPORT, (byKey = new Map()));
  const key = JSON.stringify(rest);
  let provider = byKey.get(key);
  if (!provider) {
    provider = createProvider(settings);
    if (byKey.size >= REUSED_MAX) byKey.clear();
    byKey.set(key, provider);
  }
  return provider;
}
