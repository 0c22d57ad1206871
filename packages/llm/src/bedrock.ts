/**
 * Amazon Bedrock's Converse API through the official SDK (`@aws-sdk/client-bedrock-runtime`): ConverseStream for
 * chat (the SDK signs with SigV4, or sends a Bedrock API key as a bearer token, and decodes the binary event stream),
 * InvokeModel for Titan text embeddings. The SDK's requests go through the settings' transport (undici, or the
 * caller's egress guard) by a small request handler, and its retries are off: the shared core retries, times out and cancels, as for every
 * provider. A stream that ends before `messageStop` is an error.
 */
import type { BedrockRuntimeClient, ContentBlock, ConverseStreamCommandInput, ConverseStreamOutput } from '@aws-sdk/client-bedrock-runtime';
import type { HttpHandler, HttpHandlerOptions, HttpRequest, HttpResponse } from '@smithy/core/protocols';
import {
  buildTurns,
  classifyHttpFailure,
  connectionFailure,
  embedTexts,
  guardedTransport,
  parseToolArguments,
  PROVIDER_LABEL,
  resolveSettings,
  runEventStream,
  runRequest,
  usageEvent,
  type Classified,
  type ResolvedSettings,
} from './core';
import type { HttpInit, LlmTransport } from './http';
import {
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

/** The SDK, required when the first Bedrock provider is built: a process that never calls Bedrock never loads it. */
function bedrockSdk(): typeof import('@aws-sdk/client-bedrock-runtime') {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- deliberate lazy load (Node's module cache keeps it)
  return require('@aws-sdk/client-bedrock-runtime') as typeof import('@aws-sdk/client-bedrock-runtime');
}

/** Bedrock requires an output bound on some models; used when neither the request nor the settings give one. */
export const BEDROCK_DEFAULT_MAX_TOKENS = 4096;

/** The credentials in `apiKey`: `ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN]` for SigV4, else a Bedrock API key. */
export function bedrockCredentials(
  apiKey: string,
): { kind: 'sigv4'; accessKeyId: string; secretAccessKey: string; sessionToken?: string } | { kind: 'bearer'; token: string } {
  const parts = apiKey.split(':');
  if (parts.length === 1) return { kind: 'bearer', token: apiKey };
  const [accessKeyId, secretAccessKey, ...rest] = parts;
  const sessionToken = rest.join(':');
  if (!accessKeyId || !secretAccessKey) {
    throw new LlmError('bad_request', 'the bedrock apiKey must be ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN] or a Bedrock API key');
  }
  return sessionToken ? { kind: 'sigv4', accessKeyId, secretAccessKey, sessionToken } : { kind: 'sigv4', accessKeyId, secretAccessKey };
}

/**
 * The SDK's request body as the transport takes it: its byte arrays are subclasses (`JsonBytesStringAdapter`) that
 * may be refused when they come from another realm (a test VM), so bytes are passed as a plain Buffer over the same
 * memory.
 */
function requestBody(body: unknown): HttpInit['body'] {
  if (body === undefined || body === null || typeof body === 'string') return body ?? undefined;
  if (ArrayBuffer.isView(body)) return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  return body as HttpInit['body'];
}

/**
 * A smithy request handler that sends through the settings' transport (the egress guard) instead of the SDK's own
 * http2 agent, so Bedrock's connections are checked like every other provider's. The body comes back as the Node
 * stream the SDK's stream collectors and event-stream decoder expect.
 */
export class TransportRequestHandler implements HttpHandler {
  constructor(private readonly transport: LlmTransport) {}

  async handle(request: HttpRequest, options: HttpHandlerOptions = {}): Promise<{ response: HttpResponse }> {
    // Required here, not imported: a process that never calls Bedrock does not load it (~150 ms).
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { buildQueryString, HttpResponse } = require('@smithy/core/protocols') as typeof import('@smithy/core/protocols');
    const query = buildQueryString(request.query ?? {});
    const port = request.port ? `:${request.port}` : '';
    const url = `${request.protocol}//${request.hostname}${port}${request.path}${query ? `?${query}` : ''}`;
    // Host and content-length are set by undici from the URL and the body (the same values the signature covers);
    // the hop-by-hop headers are undici's own and refused when given.
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(request.headers)) {
      if (!['host', 'content-length', 'transfer-encoding', 'connection', 'expect'].includes(name.toLowerCase())) headers[name] = value;
    }
    const reply = await this.transport(url, {
      method: request.method,
      headers,
      body: request.method === 'GET' || request.method === 'HEAD' ? undefined : requestBody(request.body),
      signal: options.abortSignal as AbortSignal | undefined,
    });
    const responseHeaders: Record<string, string> = {};
    for (const [name, value] of Object.entries(reply.headers)) {
      if (value !== undefined) responseHeaders[name] = Array.isArray(value) ? value.join(', ') : value;
    }
    return { response: new HttpResponse({ statusCode: reply.status, headers: responseHeaders, body: reply.body }) };
  }

  updateHttpClientConfig(): void {}

  httpHandlerConfigs(): Record<string, never> {
    return {};
  }
}

export class BedrockProvider implements LlmProvider {
  private readonly settings: ResolvedSettings;
  private readonly client: BedrockRuntimeClient;

  constructor(settings: LlmSettings) {
    if (settings.provider !== 'bedrock')
      throw new LlmError('bad_request', `BedrockProvider cannot serve provider "${String(settings.provider)}"`);
    const region = settings.region?.trim();
    if (!region || !/^[a-z0-9-]+$/.test(region)) throw new LlmError('bad_request', 'the bedrock provider needs a region (us-east-1...)');
    this.settings = resolveSettings(settings, `https://bedrock-runtime.${region}.amazonaws.com`);
    const s = this.settings;
    if (!s.apiKey)
      throw new LlmError('bad_request', 'the bedrock provider needs an apiKey (ACCESS_KEY_ID:SECRET_ACCESS_KEY or a Bedrock API key)');
    const credentials = bedrockCredentials(s.apiKey);
    const { BedrockRuntimeClient: Client } = bedrockSdk();
    this.client = new Client({
      region,
      // Always explicit, so the SDK resolves no endpoint (AWS_ENDPOINT_URL_*), credential or token of this process.
      endpoint: s.baseUrl,
      ...(credentials.kind === 'sigv4'
        ? {
            credentials: {
              accessKeyId: credentials.accessKeyId,
              secretAccessKey: credentials.secretAccessKey,
              sessionToken: credentials.sessionToken,
            },
            authSchemePreference: ['sigv4'],
          }
        : { token: { token: credentials.token }, authSchemePreference: ['httpBearerAuth'] }),
      useFipsEndpoint: false,
      useDualstackEndpoint: false,
      // Retries, timeouts and cancellation are run by the core, the same for every provider.
      maxAttempts: 1,
      requestHandler: new TransportRequestHandler(guardedTransport(s.transport)),
      logger: { trace() {}, debug() {}, info() {}, warn() {}, error() {} },
    });
  }

  stream(request: LlmRequest, options: LlmStreamOptions = {}): AsyncIterable<LlmEvent> {
    return this.run(request, options);
  }

  private async *run(request: LlmRequest, options: LlmStreamOptions): AsyncGenerator<LlmEvent> {
    const settings = this.settings;
    const input = buildBedrockRequest(settings, request);
    const { ConverseStreamCommand } = bedrockSdk();
    yield* runEventStream({
      settings,
      signal: options.signal,
      open: (signal) => this.client.send(new ConverseStreamCommand(input), { abortSignal: signal }),
      classify: (err) => classifyBedrockError(settings, err),
      events: (output, control) => {
        if (!output.stream) throw new LlmError('protocol', `${PROVIDER_LABEL.bedrock} answered without a stream`, { provider: 'bedrock' });
        return control.read(output.stream, (err) =>
          isServiceError(err) ? classifyBedrockError(settings, err).error : control.lostMidReply(err),
        );
      },
      translate: (events) => translateBedrockStream(events, secretsOf(settings)),
    });
  }

  /** Titan text embeddings (v2) through InvokeModel: one call per input, as the model takes one text. */
  async embed(request: LlmEmbedRequest, options: LlmStreamOptions = {}): Promise<LlmEmbedResult> {
    const settings = this.settings;
    const { model, input } = embedTexts(settings, request);
    const { InvokeModelCommand } = bedrockSdk();
    const vectors: number[][] = [];
    let inputTokens = 0;
    for (const text of input) {
      const body = JSON.stringify({ inputText: text, ...(request.dimensions !== undefined ? { dimensions: request.dimensions } : {}) });
      const output = await runRequest(
        settings,
        options.signal,
        (signal) =>
          this.client.send(new InvokeModelCommand({ modelId: model, contentType: 'application/json', accept: 'application/json', body }), {
            abortSignal: signal,
          }),
        (err) => classifyBedrockError(settings, err),
      );
      let answer: { embedding?: unknown; inputTextTokenCount?: unknown };
      try {
        answer = JSON.parse(new TextDecoder().decode(output.body)) as typeof answer;
      } catch {
        throw new LlmError('protocol', `${PROVIDER_LABEL.bedrock} sent an embedding that is not JSON`, { provider: 'bedrock' });
      }
      if (!Array.isArray(answer.embedding))
        throw new LlmError('protocol', `${PROVIDER_LABEL.bedrock} sent no embedding`, { provider: 'bedrock' });
      vectors.push(answer.embedding as number[]);
      inputTokens += typeof answer.inputTextTokenCount === 'number' ? answer.inputTextTokenCount : 0;
    }
    return { vectors, inputTokens };
  }
}

/**
 * Maps port messages onto a Converse request: system messages into `system`; assistant tool calls become `toolUse`
 * blocks; tool results become `toolResult` blocks in a user turn (consecutive ones together, as the API requires).
 */
export function buildBedrockRequest(settings: ResolvedSettings, request: LlmRequest): ConverseStreamCommandInput {
  const provider = 'bedrock' as const;
  const modelId = request.model || settings.model;
  if (!modelId) throw new LlmError('bad_request', 'no model: set one on the request or in the provider settings', { provider });
  const { system, turns: messages } = buildTurns<ContentBlock>(provider, request.messages, {
    text: (text) => ({ text }),
    toolCall: (call) => ({ toolUse: { toolUseId: call.id, name: call.name, input: call.arguments as never } }),
    toolResult: (toolUseId, content) => ({ toolResult: { toolUseId, content: [{ text: content }] } }),
  });
  const input: ConverseStreamCommandInput = {
    modelId,
    messages,
    inferenceConfig: { maxTokens: request.maxTokens ?? settings.maxTokens ?? BEDROCK_DEFAULT_MAX_TOKENS },
  };
  const temperature = request.temperature ?? settings.temperature;
  if (temperature !== undefined) input.inferenceConfig!.temperature = temperature;
  if (system.length > 0) input.system = [{ text: system.join('\n\n') }];
  if (request.tools && request.tools.length > 0) {
    input.toolConfig = {
      tools: request.tools.map((t) => ({
        toolSpec: { name: t.name, description: t.description, inputSchema: { json: t.parameters as never } },
      })),
    };
  }
  return input;
}

/** The status a Bedrock exception stands for when the SDK saw none (exceptions sent inside the event stream). */
const EXCEPTION_STATUS: Record<string, number> = {
  ValidationException: 400,
  AccessDeniedException: 403,
  UnrecognizedClientException: 403,
  ResourceNotFoundException: 404,
  ModelTimeoutException: 408,
  ModelErrorException: 424,
  ThrottlingException: 429,
  ServiceQuotaExceededException: 429,
  InternalServerException: 500,
  ModelStreamErrorException: 502,
  ServiceUnavailableException: 503,
  ModelNotReadyException: 503,
};

function isServiceError(
  err: unknown,
): err is { name: string; message?: string; $metadata?: { httpStatusCode?: number; requestId?: string } } {
  return typeof err === 'object' && err !== null && '$fault' in err && typeof (err as { name?: unknown }).name === 'string';
}

/** The key and, for an access key pair, each of its parts: none of them may show in an error message. */
function secretsOf(settings: ResolvedSettings): string[] {
  const key = settings.apiKey ?? '';
  return [key, ...key.split(':')];
}

function classifyBedrockError(settings: ResolvedSettings, err: unknown): Classified {
  if (err instanceof LlmError) return { error: err, retry: false };
  if (isServiceError(err)) {
    const response = (err as { $response?: { headers?: Record<string, string> } }).$response;
    const raw = response?.headers ?? {};
    const headers = { get: (name: string) => raw[name] ?? raw[name.toLowerCase()] ?? null };
    const status = err.$metadata?.httpStatusCode ?? EXCEPTION_STATUS[err.name] ?? 500;
    const classified = classifyHttpFailure(
      'bedrock',
      { status: EXCEPTION_STATUS[err.name] === 424 ? 502 : status, headers, providerMessage: err.message, code: err.name },
      secretsOf(settings),
    );
    if (!classified.error.requestId && err.$metadata?.requestId) {
      (classified.error as { requestId?: string }).requestId = err.$metadata.requestId;
    }
    return classified;
  }
  return connectionFailure('bedrock', err);
}

function mapStopReason(reason: string | undefined, hasToolCalls: boolean): LlmFinishReason {
  switch (reason) {
    case 'tool_use':
      return 'tool_calls';
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return 'length';
    case 'guardrail_intervened':
    case 'content_filtered':
      return 'error';
    default:
      return hasToolCalls ? 'tool_calls' : 'stop';
  }
}

const STREAM_EXCEPTIONS = [
  'internalServerException',
  'modelStreamErrorException',
  'serviceUnavailableException',
  'throttlingException',
  'validationException',
] as const;

/** Turns ConverseStream events into port events; requires `messageStop` (usage comes in `metadata`, after it). */
export async function* translateBedrockStream(
  events: AsyncIterable<ConverseStreamOutput>,
  secrets: ReadonlyArray<string | undefined> = [],
): AsyncGenerator<LlmEvent> {
  const provider = 'bedrock' as const;
  const blocks = new Map<number, { id: string; name: string; json: string }>();
  let stopReason: string | undefined;
  let stopped = false;
  let toolCalls = 0;
  let usage: LlmUsageEvent | undefined;
  let usageTold = false;

  for await (const event of events) {
    for (const key of STREAM_EXCEPTIONS) {
      const exception = (event as unknown as Record<string, { message?: string } | undefined>)[key];
      if (exception) {
        const name = key[0].toUpperCase() + key.slice(1);
        throw classifyHttpFailure(
          provider,
          { status: EXCEPTION_STATUS[name] ?? 500, providerMessage: exception.message, code: name },
          secrets,
        ).error;
      }
    }
    if (event.contentBlockStart?.start?.toolUse) {
      const { toolUseId, name } = event.contentBlockStart.start.toolUse;
      blocks.set(event.contentBlockStart.contentBlockIndex ?? 0, { id: toolUseId ?? '', name: name ?? '', json: '' });
    } else if (event.contentBlockDelta) {
      const { delta, contentBlockIndex } = event.contentBlockDelta;
      if (typeof delta?.text === 'string' && delta.text !== '') yield { type: 'text', delta: delta.text };
      else if (delta?.toolUse) {
        const block = blocks.get(contentBlockIndex ?? 0);
        if (!block)
          throw new LlmError('protocol', `${PROVIDER_LABEL[provider]} sent a tool delta for a block it did not start`, { provider });
        block.json += delta.toolUse.input ?? '';
      }
      // reasoning deltas are not part of the port.
    } else if (event.contentBlockStop) {
      const index = event.contentBlockStop.contentBlockIndex ?? 0;
      const block = blocks.get(index);
      blocks.delete(index);
      if (block) {
        if (!block.name) throw new LlmError('protocol', `${PROVIDER_LABEL[provider]} sent a tool call without a name`, { provider });
        toolCalls++;
        yield { type: 'tool_call', id: block.id, name: block.name, arguments: parseToolArguments(provider, block.name, block.json) };
      }
    } else if (event.messageStop) {
      stopped = true;
      stopReason = event.messageStop.stopReason;
    } else if (event.metadata?.usage) {
      const u = event.metadata.usage;
      // Bedrock counts cache reads and writes apart from inputTokens: the prompt is all three.
      const input = (u.inputTokens ?? 0) + (u.cacheReadInputTokens ?? 0) + (u.cacheWriteInputTokens ?? 0);
      usage = usageEvent(input, u.outputTokens, u.cacheReadInputTokens);
      // Told at once: a caller that dies before the stream closes has already stored what the call costs.
      if (stopped) {
        usageTold = true;
        yield usage;
      }
    }
  }
  if (!stopped) throw new LlmError('protocol', `the stream from ${PROVIDER_LABEL[provider]} ended before messageStop`, { provider });
  if (usage && !usageTold) yield usage;
  yield { type: 'finish', reason: mapStopReason(stopReason, toolCalls > 0) };
}
