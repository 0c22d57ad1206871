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
