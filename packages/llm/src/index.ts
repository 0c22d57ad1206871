/**
 * @svc/llm: the LLM provider port and its adapters. Fakes for tests live in `@svc/llm/testing`, not here.
 */
import { LlmError, type LlmEvent, type LlmFinishReason, type LlmMessage, type LlmSettings, type LlmToolCall } from './types';

export * from './types';
export { OpenAIProvider, OPENAI_DEFAULT_BASE_URL } from './openai';
export { AnthropicProvider, ANTHROPIC_DEFAULT_BASE_URL, ANTHROPIC_DEFAULT_MAX_TOKENS } from './anthropic';
export { GeminiProvider, GEMINI_DEFAULT_BASE_URL } from './gemini';
export { BedrockProvider, BEDROCK_DEFAULT_MAX_TOKENS, bedrockCredentials } from './bedrock';
export { throughEgress } from './egress';
export { sendHttp, type HttpInit, type HttpReply, type LlmTransport } from './http';
export { createProvider } from './provider';
export * from './breaker';
export * from './fallback';
export * from './router';
export * from './catalogue';
export * from './pricing';
export { DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT_MS, MAX_RETRY_AFTER_MS, redact } from './core';

/** Settings as stored and resolved by identity: empty strings where a value is not set. */
export interface StoredLlmSettings {
  provider: string;
  model: string;
  baseUrl: string;
  apiKey: string;
  temperature?: number;
  maxTokens?: number;
  /** Azure OpenAI's api-version ('' or absent: the default). */
  apiVersion?: string;
  /** Bedrock's AWS region. */
  region?: string;
  /** The ordered fallbacks (CONTRACT.md 9), each with its key resolved by identity ('' for none). */
  fallbacks?: Array<{ provider: string; model: string; baseUrl: string; apiKey: string; apiVersion?: string; region?: string }>;
}

/** Identity's resolved settings (tenant or platform default) as provider settings: unset values left out. */
export function llmSettingsFrom(s: StoredLlmSettings): LlmSettings {
  return {
    provider: s.provider as LlmSettings['provider'],
    model: s.model || undefined,
    baseUrl: s.baseUrl || undefined,
    apiKey: s.apiKey || undefined,
    temperature: s.temperature,
    maxTokens: s.maxTokens,
    apiVersion: s.apiVersion || undefined,
    region: s.region || undefined,
  };
}

export interface CollectedReply {
  text: string;
  toolCalls: LlmToolCall[];
  usage: { inputTokens: number; outputTokens: number; cachedInputTokens?: number } | undefined;
  finishReason: LlmFinishReason;
}

/**
 * The main model and its fallbacks as provider settings, in order, for {@link createModelChain}: each fallback gets
 * the main settings' temperature and output bound (so one reservation covers whichever model serves) and `extra`
 * (timeouts, the egress-guarded transport).
 */
export function llmCandidatesFrom(s: StoredLlmSettings, extra: Partial<LlmSettings> = {}): LlmSettings[] {
  const main = { ...llmSettingsFrom(s), ...extra };
  return [
    main,
    ...(s.fallbacks ?? []).map((f) => ({
      ...extra,
      provider: f.provider as LlmSettings['provider'],
      model: f.model,
      baseUrl: f.baseUrl || undefined,
      apiKey: f.apiKey || undefined,
      apiVersion: f.apiVersion || undefined,
      region: f.region || undefined,
      temperature: main.temperature,
      maxTokens: main.maxTokens,
    })),
  ];
}

/**
 * Reads a whole stream into one reply, calling `onEvent` for each event on the way (for streaming it on).
 * Throws what the stream throws.
 */
export async function collect(events: AsyncIterable<LlmEvent>, onEvent?: (event: LlmEvent) => void): Promise<CollectedReply> {
  let text = '';
  const toolCalls: LlmToolCall[] = [];
  let usage: CollectedReply['usage'];
  let finishReason: LlmFinishReason | undefined;
  for await (const event of events) {
    onEvent?.(event);
    switch (event.type) {
      case 'text':
        text += event.delta;
        break;
      case 'tool_call':
        toolCalls.push({ id: event.id, name: event.name, arguments: event.arguments });
        break;
      case 'usage':
        usage = { inputTokens: event.inputTokens, outputTokens: event.outputTokens };
        if (event.cachedInputTokens !== undefined) usage.cachedInputTokens = event.cachedInputTokens;
        break;
      case 'finish':
        finishReason = event.reason;
        break;
    }
  }
  if (finishReason === undefined) throw new LlmError('protocol', 'the stream ended without a finish event');
  return { text, toolCalls, usage, finishReason };
}

/**
 * Tokens of a call the provider gave no usage for (cut off before its usage event): about 4 characters a token,
 * the prompt counted the same way. Billed as an estimate (`estimated: true` on the usage event).
 */
export function estimateUsage(history: LlmMessage[], output: string): { inputTokens: number; outputTokens: number } {
  const chars = history.reduce((n, m) => n + (typeof m.content === 'string' ? m.content.length : 0), 0);
  return { inputTokens: Math.ceil(chars / 4), outputTokens: Math.ceil(output.length / 4) };
}
