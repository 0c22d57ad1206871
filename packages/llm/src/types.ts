/**
 * The LLM provider port: one streamed chat call with tools, the same for every provider.
 * Domain code (agents, chat) sees only these types; the adapters speak the wire protocols.
 */
import type { LlmTransport } from './http';

/** A JSON Schema object, passed to the provider as is (OpenAI `parameters`, Anthropic `input_schema`). */
export type JsonSchema = Record<string, unknown>;

/** A tool call the model made: `arguments` is the parsed JSON object. */
export interface LlmToolCall {
  id: string;
  name: string;
  arguments: Record<string, unknown>;
}

export type LlmRole = 'system' | 'user' | 'assistant' | 'tool';

export interface LlmMessage {
  role: LlmRole;
  /** The text. For an assistant turn that only called tools it may be empty; for `tool` it is the tool's result. */
  content: string;
  /** On `assistant` messages: the tool calls that turn made (sent back so the model sees its own calls). */
  toolCalls?: LlmToolCall[];
  /** On `tool` messages: the id of the call this message answers. Required there. */
  toolCallId?: string;
}

export interface LlmTool {
  name: string;
  description: string;
  /** JSON Schema of the arguments object (`{ type: 'object', properties: ..., required: [...] }`). */
  parameters: JsonSchema;
}

export interface LlmRequest {
  /** Model id. Falls back to the provider settings' `model`; one of the two is required. */
  model?: string;
  messages: LlmMessage[];
  tools?: LlmTool[];
  /** Falls back to the settings' `temperature`, else the provider's default. */
  temperature?: number;
  /** Upper bound on generated tokens. Falls back to the settings' `maxTokens`; Anthropic needs one, so it defaults to 4096 there. */
  maxTokens?: number;
}

export type LlmFinishReason = 'stop' | 'tool_calls' | 'length' | 'error';

/**
 * What a stream yields, in order: any number of `text` deltas and `tool_call`s (each call once, complete, with its
 * arguments parsed), then `usage` when the provider reports it, then exactly one `finish` as the last event.
 * A stream that cannot finish throws an {@link LlmError} instead of yielding `finish`.
 *
 * `finish.reason` is `error` when the provider ended the reply itself for a policy reason (OpenAI `content_filter`,
 * Anthropic `refusal`): the text so far is all there is.
 */
export type LlmEvent =
  { type: 'text'; delta: string } | ({ type: 'tool_call' } & LlmToolCall) | LlmUsageEvent | { type: 'finish'; reason: LlmFinishReason };

/**
 * What the provider counted. `inputTokens` is the whole prompt, cached part included; `cachedInputTokens` is the part
 * read from the provider's prompt cache (OpenAI `prompt_tokens_details.cached_tokens`, Anthropic
 * `cache_read_input_tokens`, Gemini `cachedContentTokenCount`, Bedrock `cacheReadInputTokens`), present only when the
 * provider reported some.
 */
export interface LlmUsageEvent {
  type: 'usage';
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens?: number;
  /** The model that answered, as the provider named it (a dated version of the one asked for), when it said. */
  model?: string;
}

export interface LlmStreamOptions {
  /** Aborting ends the stream promptly with an `LlmError` of kind `cancelled` and closes the connection. */
  signal?: AbortSignal;
}

export interface LlmProvider {
  /**
   * Streams one model reply. Lazy: the request is sent when iteration starts. Breaking out of the loop closes the
   * connection. Every failure is an {@link LlmError}.
   */
  stream(request: LlmRequest, options?: LlmStreamOptions): AsyncIterable<LlmEvent>;
  /**
   * Embeds each input (one vector per input, in order). Present on the providers that have embeddings (`openai`,
   * `openai-compatible`, `azure-openai`, `gemini`, `bedrock`); absent on `anthropic`.
   */
  embed?(request: LlmEmbedRequest, options?: LlmStreamOptions): Promise<LlmEmbedResult>;
}

export interface LlmEmbedRequest {
  /** Embedding model (Azure: the deployment). Falls back to the settings' `model`. */
  model?: string;
  /** Texts, or token arrays (the model's token ids, as OpenAI takes them; only the OpenAI protocol's providers do). */
  input: string[] | number[][];
  /** Output dimensions, for the models that can shorten their vectors. */
  dimensions?: number;
}

export interface LlmEmbedResult {
  vectors: number[][];
  inputTokens: number;
  /** True when the provider reported no token count (Gemini) and `inputTokens` is estimated at ~4 characters a token. */
  estimated?: boolean;
}

export type LlmProviderKind = 'openai' | 'anthropic' | 'openai-compatible' | 'azure-openai' | 'gemini' | 'bedrock';

/** Every provider kind, for validating settings. */
export const LLM_PROVIDER_KINDS: readonly LlmProviderKind[] = [
  'openai',
  'anthropic',
  'openai-compatible',
  'azure-openai',
  'gemini',
  'bedrock',
];

export interface LlmSettings {
  provider: LlmProviderKind;
  /**
   * Required for every provider but `openai-compatible` (no `Authorization` header without it).
   * `azure-openai`: the resource key (`api-key` header). `gemini`: the API key (`x-goog-api-key`).
   * `bedrock`: either `ACCESS_KEY_ID:SECRET_ACCESS_KEY` (or `ACCESS_KEY_ID:SECRET_ACCESS_KEY:SESSION_TOKEN`), signed
   * with SigV4, or a Bedrock API key (no `:` in it), sent as `Authorization: Bearer`.
   */
  apiKey?: string;
  /**
   * `openai` / `openai-compatible`: includes the version path (`https://api.openai.com/v1`,
   * `http://127.0.0.1:11434/v1`); requests go to `baseUrl + /chat/completions`. Required for `openai-compatible`.
   * `anthropic`: the API root (`https://api.anthropic.com`); requests go to `baseUrl + /v1/messages` (a trailing
   * `/v1` given here is dropped, so both spellings work).
   * `azure-openai`: the resource endpoint (`https://NAME.openai.azure.com`); requests go to
   * `baseUrl + /openai/deployments/{model}/chat/completions?api-version=...`. Required.
   * `gemini`: default `https://generativelanguage.googleapis.com/v1beta` (a root without a path gets `/v1beta`).
   * `bedrock`: default `https://bedrock-runtime.{region}.amazonaws.com` (an endpoint override: VPC endpoint, a proxy).
   */
  baseUrl?: string;
  /** Default model when a request names none (Azure: the deployment name; Bedrock: a model or inference profile id). */
  model?: string;
  /** `azure-openai`: the `api-version` query parameter. Default {@link AZURE_DEFAULT_API_VERSION}. */
  apiVersion?: string;
  /** `bedrock`: the AWS region (signing and the default endpoint). Required for `bedrock`. */
  region?: string;
  /** Default temperature when a request gives none. */
  temperature?: number;
  /** Default output token limit when a request gives none. */
  maxTokens?: number;
  /**
   * Longest wait, in milliseconds, for the response headers and then for each next piece of the stream
   * (an idle timeout, so a long reply that keeps streaming is not cut). Default 60 000.
   */
  timeoutMs?: number;
  /** Retries of a failed request (429, 408, 5xx, connection failure) before any of the reply arrived. Default 2. */
  maxRetries?: number;
  /**
   * What every request goes through: the caller's egress guard (`throughEgress`). It may throw an {@link LlmError} to
   * refuse a request; that error is thrown from the stream as is and not retried. Default: undici's `request` on the
   * process's keep-alive pool (`sendHttp`).
   */
  transport?: LlmTransport;
}

/** Azure OpenAI's `api-version` when the settings give none (the GA version with `stream_options` and usage). */
export const AZURE_DEFAULT_API_VERSION = '2024-10-21';

export type LlmErrorKind = 'auth' | 'rate_limited' | 'bad_request' | 'unavailable' | 'timeout' | 'cancelled' | 'protocol';

export interface LlmErrorDetails {
  /** HTTP status of the provider's answer, when there was one. */
  status?: number;
  /** What the provider asked us to wait before trying again (`retry-after-ms` / `retry-after`). */
  retryAfterMs?: number;
  /** The provider's request id (`x-request-id` / `request-id`), for support tickets. */
  requestId?: string;
  /** The provider's error type or code (`invalid_api_key`, `overloaded_error`...). */
  code?: string;
  provider?: LlmProviderKind;
  /** A sanitized description of the underlying failure: an error name and system code, never a message or headers. */
  cause?: { name?: string; code?: string };
}

/**
 * The only error a provider throws. `message` is safe to log and to show: it never contains the API key or any
 * request header, and neither does anything else on the object (`cause` is a sanitized `{name, code}`).
 */
export class LlmError extends Error {
  override readonly name = 'LlmError';
  readonly kind: LlmErrorKind;
  // Declared, not initialised: a detail that does not apply is absent rather than an own `undefined`.
  declare readonly status?: number;
  declare readonly retryAfterMs?: number;
  declare readonly requestId?: string;
  declare readonly code?: string;
  declare readonly provider?: LlmProviderKind;

  constructor(kind: LlmErrorKind, message: string, details: LlmErrorDetails = {}) {
    super(message, details.cause ? { cause: details.cause } : undefined);
    this.kind = kind;
    const self = this as { -readonly [K in keyof LlmError]: LlmError[K] };
    if (details.status !== undefined) self.status = details.status;
    if (details.retryAfterMs !== undefined) self.retryAfterMs = details.retryAfterMs;
    if (details.requestId !== undefined) self.requestId = details.requestId;
    if (details.code !== undefined) self.code = details.code;
    if (details.provider !== undefined) self.provider = details.provider;
  }

  /** Whether trying the same request again later may succeed. */
  get retryable(): boolean {
    return this.kind === 'rate_limited' || this.kind === 'unavailable' || this.kind === 'timeout';
  }

  toJSON(): Record<string, unknown> {
    return {
      name: this.name,
      kind: this.kind,
      message: this.message,
      status: this.status,
      retryAfterMs: this.retryAfterMs,
      requestId: this.requestId,
      code: this.code,
      provider: this.provider,
    };
  }
}

export function isLlmError(value: unknown): value is LlmError {
  return value instanceof LlmError;
}
