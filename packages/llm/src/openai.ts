/**
 * OpenAI Chat Completions, streamed: OpenAI itself, OpenAI-compatible servers (Ollama, vLLM, llama.cpp, LM Studio) and
 * Azure OpenAI (the same wire format on deployment URLs: the model in the path as the deployment, `api-version` in
 * the query, the key as `api-key`). One POST on the shared core (postJson, on undici); the SSE body is read here so
 * that a stream that stops before `data: [DONE]` is an error rather than a short, silent success. Also embeddings
 * (`POST /embeddings`). The SDK's package gives the wire types only.
 */
import type {
  ChatCompletionChunk,
  ChatCompletionCreateParamsStreaming,
  ChatCompletionMessageParam,
} from 'openai/resources/chat/completions';
import type { CreateEmbeddingResponse } from 'openai/resources/embeddings';
import {
  usageEvent,
  classifyHttpFailure,
  connectionFailure,
  embedInputs,
  parseEventData,
  parseToolArguments,
  postJson,
  PROVIDER_LABEL,
  ProviderHttpError,
  readJson,
  resolveSettings,
  runRequest,
  runStream,
  type Classified,
  type ResolvedSettings,
} from './core';
import type { SseMessage } from './sse';
import {
  AZURE_DEFAULT_API_VERSION,
  LlmError,
  type LlmEmbedRequest,
  type LlmEmbedResult,
  type LlmEvent,
  type LlmFinishReason,
  type LlmProvider,
  type LlmRequest,
  type LlmSettings,
  type LlmStreamOptions,
  type LlmUsageEvent,
} from './types';

export const OPENAI_DEFAULT_BASE_URL = 'https://api.openai.com/v1';

export class OpenAIProvider implements LlmProvider {
  private readonly settings: ResolvedSettings;
  /** The URL of an endpoint (`/chat/completions`, `/embeddings`) for a model. */
  private readonly endpoint: (path: string, model: string) => string;
  /** Authentication: a bearer token (none without a key: a local server), or Azure's `api-key`. */
  private readonly auth: Record<string, string>;

  constructor(settings: LlmSettings) {
    const kind = settings.provider;
    if (kind !== 'openai' && kind !== 'openai-compatible' && kind !== 'azure-openai') {
      throw new LlmError('bad_request', `OpenAIProvider cannot serve provider "${String(kind)}"`);
    }
    this.settings = resolveSettings(settings, kind === 'openai' ? OPENAI_DEFAULT_BASE_URL : undefined);
    if (kind !== 'openai-compatible' && !this.settings.apiKey) throw new LlmError('bad_request', `the ${kind} provider needs an apiKey`);
    const { baseUrl, apiKey } = this.settings;
    if (kind === 'azure-openai') {
      const query = `?api-version=${encodeURIComponent(settings.apiVersion || AZURE_DEFAULT_API_VERSION)}`;
      // The resource endpoint (a trailing /openai given here is accepted), then the deployment (the model).
      const root = `${baseUrl.replace(/\/openai$/, '')}/openai`;
      this.endpoint = (path, model) => `${root}/deployments/${encodeURIComponent(model)}${path}${query}`;
      this.auth = { 'api-key': apiKey! };
    } else {
      this.endpoint = (path) => `${baseUrl}${path}`;
      this.auth = apiKey ? { authorization: `Bearer ${apiKey}` } : {};
    }
  }

  stream(request: LlmRequest, options: LlmStreamOptions = {}): AsyncIterable<LlmEvent> {
    return this.run(request, options);
  }

  private async *run(request: LlmRequest, options: LlmStreamOptions): AsyncGenerator<LlmEvent> {
    const settings = this.settings;
    // Built inside the generator: a bad request fails the stream like any other error, and nothing runs before iteration.
    const body = buildOpenAIRequest(settings, request);
    const url = this.endpoint('/chat/completions', body.model);
    yield* runStream({
      settings,
      signal: options.signal,
      open: (signal) => postJson({ settings, url, headers: this.auth, body, signal }),
      classify: (err) => classifyOpenAIError(settings, err),
      translate: (messages) => translateOpenAIStream(settings.provider, messages, [settings.apiKey]),
    });
  }

  async embed(request: LlmEmbedRequest, options: LlmStreamOptions = {}): Promise<LlmEmbedResult> {
    const settings = this.settings;
    const { model, input } = embedInputs(settings, request);
    const body = {
      model,
      input,
      // Floats asked for explicitly: base64 (the SDK's default) is not spoken by every compatible server.
      encoding_format: 'float' as const,
      ...(request.dimensions !== undefined ? { dimensions: request.dimensions } : {}),
    };
    const url = this.endpoint('/embeddings', model);
    const answer = (await runRequest(
      settings,
      options.signal,
      async (signal) =>
        readJson(settings.provider, await postJson({ settings, url, headers: this.auth, body, signal }), 'embeddings', signal),
      (err) => classifyOpenAIError(settings, err),
    )) as Partial<CreateEmbeddingResponse> | null;
    const vectors: number[][] = [];
    for (const item of answer?.data ?? []) vectors[item.index ?? vectors.length] = item.embedding;
    if (vectors.length !== input.length || vectors.some((v) => !Array.isArray(v))) {
      throw new LlmError(
        'protocol',
        `${PROVIDER_LABEL[settings.provider]} answered ${vectors.length} embeddings for ${input.length} inputs`,
        {
          provider: settings.provider,
        },
      );
    }
    return { vectors, inputTokens: answer?.usage?.prompt_tokens ?? 0 };
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
    // OpenAI replaced max_tokens (its reasoning models refuse it; Azure follows); compatible servers know max_tokens.
    if (settings.provider !== 'openai-compatible') body.max_completion_tokens = maxTokens;
    else body.max_tokens = maxTokens;
  }
  return body;
}

function classifyOpenAIError(settings: ResolvedSettings, err: unknown): Classified {
  if (err instanceof LlmError) return { error: err, retry: false };
  if (err instanceof ProviderHttpError) return classifyHttpFailure(settings.provider, err.failure, [settings.apiKey]);
  return connectionFailure(settings.provider, err);
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
  let usage: LlmUsageEvent | undefined;
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
      if (usage && !usageEmitted) yield usage;
      yield { type: 'finish', reason: mapFinishReason(finishReason, calls.size > 0) };
      return;
    }
    const chunk = parseEventData(provider, message.data) as ChatCompletionChunk & { error?: Record<string, unknown> };
    if (chunk.error && typeof chunk.error === 'object') throw streamedError(provider, chunk.error, secrets);
    if (chunk.usage) {
      usage = usageEvent(
        chunk.usage.prompt_tokens,
        chunk.usage.completion_tokens,
        chunk.usage.prompt_tokens_details?.cached_tokens,
        chunk.model,
      );
    }
    const choice = chunk.choices?.find((c) => (c.index ?? 0) === 0);
    if (!choice) {
      // The usage chunk (after the finish reason, no choices): told at once, so a caller that dies before [DONE]
      // has already stored what the provider charges.
      if (usage && finishReason) {
        usageEmitted = true;
        yield* emitToolCalls();
        yield usage;
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
