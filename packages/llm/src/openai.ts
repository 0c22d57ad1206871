/**
 * OpenAI Chat Completions, streamed: OpenAI itself and OpenAI-compatible servers (Ollama, vLLM, llama.cpp, LM Studio).
 * The official SDK builds and sends the request (URL, auth header, error statuses); the SSE body is read here so that a
 * stream that stops before `data: [DONE]` is an error rather than a short, silent success.
 */
import type OpenAI from 'openai';
import type {
  ChatCompletionChunk,
  ChatCompletionCreateParamsStreaming,
  ChatCompletionMessageParam,
} from 'openai/resources/chat/completions';
import {
  classifyHttpFailure,
  connectionFailure,
  guardedFetch,
  parseEventData,
  parseToolArguments,
  PROVIDER_LABEL,
  resolveSettings,
  runStream,
  sanitizedCause,
  type Classified,
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

/**
 * The OpenAI SDK, required when the first provider of this kind is built (it takes ~100-200 ms to load): a process
 * that never calls OpenAI never loads it.
 */
function openaiSdk(): typeof import('openai') {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- deliberate lazy load (Node's module cache keeps it)
  return require('openai') as typeof import('openai');
}

export const OPENAI_DEFAULT_BASE_URL = 'https://api.openai.com/v1';

export class OpenAIProvider implements LlmProvider {
  private readonly settings: ResolvedSettings;
  private readonly client: OpenAI;

  constructor(settings: LlmSettings) {
    if (settings.provider !== 'openai' && settings.provider !== 'openai-compatible') {
      throw new LlmError('bad_request', `OpenAIProvider cannot serve provider "${String(settings.provider)}"`);
    }
    this.settings = resolveSettings(settings, settings.provider === 'openai' ? OPENAI_DEFAULT_BASE_URL : undefined);
    if (settings.provider === 'openai' && !this.settings.apiKey) throw new LlmError('bad_request', 'the openai provider needs an apiKey');
    const s = this.settings;
    this.client = new (openaiSdk().OpenAI)({
      // Everything explicit, so the SDK reads no OPENAI_* variable of this process (a tenant's server must never
      // receive the platform's key, organization or project).
      apiKey: s.apiKey ?? 'unused',
      organization: null,
      project: null,
      webhookSecret: null,
      baseURL: s.baseUrl,
      // Without a key (a local server), send no Authorization header at all.
      defaultHeaders: s.apiKey ? undefined : { Authorization: null },
      // Retries, timeouts and cancellation are run by core.runStream, the same for every provider.
      maxRetries: 0,
      timeout: Math.ceil(s.timeoutMs) * 2 + 1000,
      fetch: guardedFetch(s.fetch),
      logLevel: 'off',
    });
  }

  stream(request: LlmRequest, options: LlmStreamOptions = {}): AsyncIterable<LlmEvent> {
    return this.run(request, options);
  }

  private async *run(request: LlmRequest, options: LlmStreamOptions): AsyncGenerator<LlmEvent> {
    const settings = this.settings;
    // Built inside the generator: a bad request fails the stream like any other error, and nothing runs before iteration.
    const body = buildOpenAIRequest(settings, request);
    yield* runStream({
      settings,
      signal: options.signal,
      open: (signal) => this.client.chat.completions.create(body, { signal }).asResponse(),
      classify: (err) => classifyOpenAIError(settings, err),
      translate: (messages) => translateOpenAIStream(settings.provider, messages, [settings.apiKey]),
    });
  }
}

/** Maps port messages and tools onto a Chat Completions request body. */
export function buildOpenAIRequest(settings: ResolvedSettings, request: LlmRequest): ChatCompletionCreateParamsStreaming {
  const model = request.model || settings.model;
  if (!model)
    throw new LlmError('bad_request', 'no model: set one on the request or in the provider settings', { provider: settings.provider });
  const messages: ChatCompletionMessageParam[] = request.messages.map((m, i): ChatCompletionMessageParam => {
    switch (m.role) {
      case 'system':
        return { role: 'system', content: m.content };
      case 'user':
        return { role: 'user', content: m.content };
      case 'assistant':
        if (m.toolCalls && m.toolCalls.length > 0) {
          return {
            role: 'assistant',
            content: m.content === '' ? null : m.content,
            tool_calls: m.toolCalls.map((c) => ({
              id: c.id,
              type: 'function',
              function: { name: c.name, arguments: JSON.stringify(c.arguments) },
            })),
          };
        }
        return { role: 'assistant', content: m.content };
      case 'tool':
        if (!m.toolCallId)
          throw new LlmError('bad_request', `messages[${i}]: a tool message needs toolCallId`, { provider: settings.provider });
        return { role: 'tool', tool_call_id: m.toolCallId, content: m.content };
      default:
        throw new LlmError('bad_request', `messages[${i}]: unknown role`, { provider: settings.provider });
    }
  });
  const body: ChatCompletionCreateParamsStreaming = {
    model,
    messages,
    stream: true,
    stream_options: { include_usage: true },
  };
  if (request.tools && request.tools.length > 0) {
    body.tools = request.tools.map((t) => ({
      type: 'function',
      function: { name: t.name, description: t.description, parameters: t.parameters },
    }));
  }
  const temperature = request.temperature ?? settings.temperature;
  if (temperature !== undefined) body.temperature = temperature;
  const maxTokens = request.maxTokens ?? settings.maxTokens;
  if (maxTokens !== undefined) {
    // OpenAI replaced max_tokens (its reasoning models refuse it); compatible servers know max_tokens.
    if (settings.provider === 'openai') body.max_completion_tokens = maxTokens;
    else body.max_tokens = maxTokens;
  }
  return body;
}

function classifyOpenAIError(settings: ResolvedSettings, err: unknown): Classified {
  const secrets = [settings.apiKey];
  const provider = settings.provider;
  if (err instanceof LlmError) return { error: err, retry: false };
  if (err instanceof openaiSdk().APIConnectionTimeoutError) {
    return { error: new LlmError('timeout', `${PROVIDER_LABEL[provider]} did not answer in time`, { provider }), retry: false };
  }
  if (err instanceof openaiSdk().APIConnectionError) return connectionFailure(provider, err);
  if (err instanceof openaiSdk().APIError && typeof err.status === 'number') {
    const body = err.error as { message?: unknown; code?: unknown; type?: unknown } | undefined;
    const code = typeof body?.code === 'string' ? body.code : typeof body?.type === 'string' ? body.type : undefined;
    return classifyHttpFailure(provider, { status: err.status, headers: err.headers, providerMessage: body?.message, code }, secrets);
  }
  if (err instanceof openaiSdk().OpenAIError) {
    return { error: new LlmError('bad_request', 'the request could not be sent', { provider, cause: sanitizedCause(err) }), retry: false };
  }
  return connectionFailure(provider, err);
}

interface PendingToolCall {
  index: number;
  id: string;
  name: string;
  arguments: string;
}

function mapFinishReason(reason: string | null | undefined, hasToolCalls: boolean): LlmFinishReason {
  switch (reason) {
    case 'tool_calls':
    case 'function_call':
      return 'tool_calls';
    case 'length':
      return 'length';
    case 'content_filter':
      return 'error';
    default:
      // Some compatible servers say `stop` after tool calls.
      return hasToolCalls ? 'tool_calls' : 'stop';
  }
}

/** An error object sent in the stream (`data: {"error": {...}}`) after a 200. */
function streamedError(
  provider: ResolvedSettings['provider'],
  error: { message?: unknown; type?: unknown; code?: unknown },
  secrets: ReadonlyArray<string | undefined>,
): LlmError {
  const code = typeof error.code === 'string' ? error.code : typeof error.type === 'string' ? error.type : undefined;
  const status = /rate.?limit/i.test(`${code}`) ? 429 : /invalid|not.?found|bad.?request/i.test(`${code}`) ? 400 : 500;
  return classifyHttpFailure(provider, { status, providerMessage: error.message, code }, secrets).error;
}

/** Turns `chat.completion.chunk` events into port events; requires `data: [DONE]` at the end. */
export async function* translateOpenAIStream(
  provider: ResolvedSettings['provider'],
  messages: AsyncIterable<SseMessage>,
  secrets: ReadonlyArray<string | undefined> = [],
): AsyncGenerator<LlmEvent> {
  const calls = new Map<number, PendingToolCall>();
  let finishReason: string | null | undefined;
  let toolCallsEmitted = false;
  let usage: { inputTokens: number; outputTokens: number } | undefined;
  let usageEmitted = false;

  function* emitToolCalls(): Generator<LlmEvent> {
    if (toolCallsEmitted) return;
    toolCallsEmitted = true;
    for (const call of [...calls.values()].sort((a, b) => a.index - b.index)) {
      if (!call.name) throw new LlmError('protocol', `${PROVIDER_LABEL[provider]} sent a tool call without a name`, { provider });
      yield { type: 'tool_call', id: call.id, name: call.name, arguments: parseToolArguments(provider, call.name, call.arguments) };
    }
  }

  for await (const message of messages) {
    if (message.data.trim() === '[DONE]') {
      yield* emitToolCalls();
      if (usage && !usageEmitted) yield { type: 'usage', ...usage };
      yield { type: 'finish', reason: mapFinishReason(finishReason, calls.size > 0) };
      return;
    }
    const chunk = parseEventData(provider, message.data) as ChatCompletionChunk & { error?: Record<string, unknown> };
    if (chunk.error && typeof chunk.error === 'object') throw streamedError(provider, chunk.error, secrets);
    if (chunk.usage) {
      usage = { inputTokens: chunk.usage.prompt_tokens ?? 0, outputTokens: chunk.usage.completion_tokens ?? 0 };
    }
    const choice = chunk.choices?.find((c) => (c.index ?? 0) === 0);
    if (!choice) {
      // The usage chunk (after the finish reason, no choices): told at once, so a caller that dies before [DONE]
      // has already stored what the provider charges.
      if (usage && finishReason) {
        usageEmitted = true;
        yield* emitToolCalls();
        yield { type: 'usage', ...usage };
      }
      continue;
    }
    const delta = choice.delta ?? {};
    if (typeof delta.content === 'string' && delta.content !== '') yield { type: 'text', delta: delta.content };
    if (Array.isArray(delta.tool_calls)) {
      for (const [position, part] of delta.tool_calls.entries()) {
        // `index` is required by OpenAI; a few compatible servers leave it out and send each call whole.
        const index = typeof part.index === 'number' ? part.index : calls.size + position;
        let call = calls.get(index);
        if (!call) {
          call = { index, id: part.id ?? `call_${index}`, name: '', arguments: '' };
          calls.set(index, call);
        } else if (part.id) {
          call.id = part.id;
        }
        const fn = part.function as { name?: string; arguments?: unknown } | undefined;
        if (fn?.name && !call.name) call.name = fn.name;
        if (typeof fn?.arguments === 'string') call.arguments += fn.arguments;
        else if (fn?.arguments && typeof fn.arguments === 'object') call.arguments += JSON.stringify(fn.arguments);
      }
    }
    if (choice.finish_reason) {
      finishReason = choice.finish_reason;
      yield* emitToolCalls();
    }
  }
  throw new LlmError('protocol', `the stream from ${PROVIDER_LABEL[provider]} ended before [DONE]`, { provider });
}
