/**
 * Anthropic Messages API (`anthropic-version: 2023-06-01`), streamed: `POST {baseUrl}/v1/messages` with `x-api-key`,
 * sent on the shared core (postJson, on undici). The SSE body is read here so that a stream that stops before
 * `message_stop` is an error rather than a short, silent success. The SDK's package gives the wire types only.
 */
import type { ContentBlockParam, MessageCreateParamsStreaming, RawMessageStreamEvent, Tool } from '@anthropic-ai/sdk/resources/messages';
import {
  buildTurns,
  classifyHttpFailure,
  connectionFailure,
  parseEventData,
  parseToolArguments,
  postJson,
  PROVIDER_LABEL,
  ProviderHttpError,
  resolveSettings,
  runStream,
  usageEvent,
  type Classified,
  type ReadFailure,
  type ResolvedSettings,
} from './core';
import type { SseMessage } from './sse';
import {
  LlmError,
  type LlmEvent,
  type LlmFinishReason,
  type LlmProvider,
  type LlmRequest,
  type LlmSettings,
  type LlmStreamOptions,
} from './types';

export const ANTHROPIC_DEFAULT_BASE_URL = 'https://api.anthropic.com';
/** Anthropic requires `max_tokens`; used when neither the request nor the settings give one. */
export const ANTHROPIC_DEFAULT_MAX_TOKENS = 4096;
export const ANTHROPIC_VERSION = '2023-06-01';

export class AnthropicProvider implements LlmProvider {
  private readonly settings: ResolvedSettings;
  private readonly headers: Record<string, string>;

  constructor(settings: LlmSettings) {
    if (settings.provider !== 'anthropic') {
      throw new LlmError('bad_request', `AnthropicProvider cannot serve provider "${String(settings.provider)}"`);
    }
    const resolved = resolveSettings(settings, ANTHROPIC_DEFAULT_BASE_URL);
    if (!resolved.apiKey) throw new LlmError('bad_request', 'the anthropic provider needs an apiKey');
    // The API root: /v1/messages is appended; a base URL written with the version path is accepted too.
    this.settings = { ...resolved, baseUrl: resolved.baseUrl.replace(/\/v1$/, '') };
    this.headers = { 'x-api-key': resolved.apiKey, 'anthropic-version': ANTHROPIC_VERSION };
  }

  stream(request: LlmRequest, options: LlmStreamOptions = {}): AsyncIterable<LlmEvent> {
    return this.run(request, options);
  }

  private async *run(request: LlmRequest, options: LlmStreamOptions): AsyncGenerator<LlmEvent> {
    const settings = this.settings;
    // Built inside the generator: a bad request fails the stream like any other error, and nothing runs before iteration.
    const body = buildAnthropicRequest(settings, request);
    const url = `${settings.baseUrl}/v1/messages`;
    yield* runStream({
      settings,
      signal: options.signal,
      open: (signal) => postJson({ settings, url, headers: this.headers, body, signal, readFailure: readAnthropicFailure }),
      classify: (err) => classifyAnthropicError(settings, err),
      translate: (messages) => translateAnthropicStream(messages, [settings.apiKey]),
    });
  }
}

/**
 * Maps port messages onto a Messages request: system messages join into `system`; assistant tool calls become
 * `tool_use` blocks; tool results become `tool_result` blocks in a user turn (consecutive ones in the same turn, as
 * the API requires).
 */
export function buildAnthropicRequest(settings: ResolvedSettings, request: LlmRequest): MessageCreateParamsStreaming {
  const provider = settings.provider;
  const model = request.model || settings.model;
  if (!model) throw new LlmError('bad_request', 'no model: set one on the request or in the provider settings', { provider });
  const { system, turns: messages } = buildTurns<ContentBlockParam>(provider, request.messages, {
    text: (text) => ({ type: 'text', text }),
    toolCall: (call) => ({ type: 'tool_use', id: call.id, name: call.name, input: call.arguments }),
    toolResult: (toolCallId, content) => ({ type: 'tool_result', tool_use_id: toolCallId, content }),
  });
  const body: MessageCreateParamsStreaming = {
    model,
    max_tokens: request.maxTokens ?? settings.maxTokens ?? ANTHROPIC_DEFAULT_MAX_TOKENS,
    messages,
    stream: true,
  };
  if (system.length > 0) body.system = system.join('\n\n');
  if (request.tools && request.tools.length > 0) {
    body.tools = request.tools.map((t): Tool => ({
      name: t.name,
      description: t.description,
      input_schema: { type: 'object', ...t.parameters } as Tool.InputSchema,
    }));
  }
  const temperature = request.temperature ?? settings.temperature;
  if (temperature !== undefined) body.temperature = temperature;
  return body;
}

/** Anthropic's error body: `{"type": "error", "error": {"type", "message"}}`. */
const readAnthropicFailure: ReadFailure = (status, body, headers) => {
  const raw = (body as { error?: unknown } | undefined)?.error;
  const error = (raw && typeof raw === 'object' ? raw : {}) as { type?: unknown; message?: unknown };
  return { status, headers, providerMessage: error.message, code: typeof error.type === 'string' ? error.type : undefined };
};

function classifyAnthropicError(settings: ResolvedSettings, err: unknown): Classified {
  if (err instanceof LlmError) return { error: err, retry: false };
  if (err instanceof ProviderHttpError) return classifyHttpFailure(settings.provider, err.failure, [settings.apiKey]);
  return connectionFailure(settings.provider, err);
}

/** The status an `event: error` type corresponds to, so it maps like the same error before the stream. */
const STREAM_ERROR_STATUS: Record<string, number> = {
  invalid_request_error: 400,
  authentication_error: 401,
  permission_error: 403,
  not_found_error: 404,
  request_too_large: 413,
  rate_limit_error: 429,
  api_error: 500,
  timeout_error: 504,
  overloaded_error: 529,
};

function mapStopReason(reason: string | null | undefined): LlmFinishReason {
  switch (reason) {
    case 'tool_use':
      return 'tool_calls';
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return 'length';
    case 'refusal':
      return 'error';
    default:
      return 'stop';
  }
}

interface OpenBlock {
  type: string;
  id: string;
  name: string;
  json: string;
  input: unknown;
}

/** Turns Messages stream events into port events; requires `message_stop` at the end. */
export async function* translateAnthropicStream(
  messages: AsyncIterable<SseMessage>,
  secrets: ReadonlyArray<string | undefined> = [],
): AsyncGenerator<LlmEvent> {
  const provider = 'anthropic' as const;
  const blocks = new Map<number, OpenBlock>();
  let started = false;
  // Billed input is the plain input plus what was written to and read from the prompt cache.
  const input = { plain: 0, cacheWrite: 0, cacheRead: 0 };
  let outputTokens = 0;
  let sawUsage = false;
  /** The model that answered, as message_start names it. */
  let answeredBy: string | undefined;
  let stopReason: string | null | undefined;

  for await (const message of messages) {
    if (message.event === 'ping') continue;
    const event = parseEventData(provider, message.data) as
      RawMessageStreamEvent | { type: 'error'; error?: { type?: string; message?: unknown } } | { type: string };
    switch (event.type) {
      case 'error': {
        const error = (event as { error?: { type?: string; message?: unknown } }).error ?? {};
        const type = typeof error.type === 'string' ? error.type : 'api_error';
        throw classifyHttpFailure(
          provider,
          { status: STREAM_ERROR_STATUS[type] ?? 500, providerMessage: error.message, code: type },
          secrets,
        ).error;
      }
      case 'message_start': {
        const message = (event as Extract<RawMessageStreamEvent, { type: 'message_start' }>).message;
        const usage = message?.usage;
        if (typeof message?.model === 'string') answeredBy = message.model;
        started = true;
        if (usage) {
          sawUsage = true;
          input.plain = usage.input_tokens ?? 0;
          input.cacheWrite = usage.cache_creation_input_tokens ?? 0;
          input.cacheRead = usage.cache_read_input_tokens ?? 0;
          outputTokens = usage.output_tokens ?? 0;
        }
        break;
      }
      case 'content_block_start': {
        const e = event as Extract<RawMessageStreamEvent, { type: 'content_block_start' }>;
        const block = e.content_block as { type: string; id?: string; name?: string; input?: unknown; text?: string };
        blocks.set(e.index, { type: block.type, id: block.id ?? '', name: block.name ?? '', json: '', input: block.input });
        if (block.type === 'text' && typeof block.text === 'string' && block.text !== '') yield { type: 'text', delta: block.text };
        break;
      }
      case 'content_block_delta': {
        const e = event as Extract<RawMessageStreamEvent, { type: 'content_block_delta' }>;
        const delta = e.delta as { type: string; text?: string; partial_json?: string };
        if (delta.type === 'text_delta' && typeof delta.text === 'string' && delta.text !== '') {
          yield { type: 'text', delta: delta.text };
        } else if (delta.type === 'input_json_delta' && typeof delta.partial_json === 'string') {
          const block = blocks.get(e.index);
          if (!block) throw new LlmError('protocol', `${PROVIDER_LABEL[provider]} sent a delta for a block it did not start`, { provider });
          block.json += delta.partial_json;
        }
        // thinking, signature and citation deltas are not part of the port.
        break;
      }
      case 'content_block_stop': {
        const e = event as Extract<RawMessageStreamEvent, { type: 'content_block_stop' }>;
        const block = blocks.get(e.index);
        blocks.delete(e.index);
        if (block?.type === 'tool_use') {
          const args =
            block.json.trim() === '' && block.input && typeof block.input === 'object' && !Array.isArray(block.input)
              ? (block.input as Record<string, unknown>)
              : parseToolArguments(provider, block.name, block.json);
          yield { type: 'tool_call', id: block.id, name: block.name, arguments: args };
        }
        break;
      }
      case 'message_delta': {
        const e = event as Extract<RawMessageStreamEvent, { type: 'message_delta' }>;
        if (e.delta?.stop_reason) stopReason = e.delta.stop_reason;
        const usage = e.usage as
          | {
              output_tokens?: number | null;
              input_tokens?: number | null;
              cache_creation_input_tokens?: number | null;
              cache_read_input_tokens?: number | null;
            }
          | undefined;
        if (usage) {
          sawUsage = true;
          if (typeof usage.output_tokens === 'number') outputTokens = usage.output_tokens;
          // The counts here are cumulative; input counts are repeated by newer API revisions.
          if (typeof usage.input_tokens === 'number') input.plain = usage.input_tokens;
          if (typeof usage.cache_creation_input_tokens === 'number') input.cacheWrite = usage.cache_creation_input_tokens;
          if (typeof usage.cache_read_input_tokens === 'number') input.cacheRead = usage.cache_read_input_tokens;
        }
        break;
      }
      case 'message_stop':
        if (!started) throw new LlmError('protocol', `${PROVIDER_LABEL[provider]} ended a message it did not start`, { provider });
        if (sawUsage) yield usageEvent(input.plain + input.cacheWrite + input.cacheRead, outputTokens, input.cacheRead, answeredBy);
        yield { type: 'finish', reason: mapStopReason(stopReason) };
        return;
      default:
        // Event types added later are skipped, as the API versioning policy asks of clients.
        break;
    }
  }
  throw new LlmError('protocol', `the stream from ${PROVIDER_LABEL[provider]} ended before message_stop`, { provider });
}
