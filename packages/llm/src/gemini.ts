/**
 * Google's Gemini API on its own wire protocol: `POST {baseUrl}/models/{model}:streamGenerateContent?alt=sse` with
 * `x-goog-api-key`, roles `user` / `model`, `systemInstruction`, tools as `functionDeclarations`, usage from
 * `usageMetadata`; embeddings through `:batchEmbedContents`. Sent over the shared core (postJson on the transport, the
 * caller's egress guard; one retry and idle-timeout policy, the SSE reader) rather than Google's SDK: see
 * docs/decisions.md.
 *
 * Gemini's stream has no end marker: the last chunk carries the candidate's `finishReason`. A stream that ends
 * without one was cut, and is an error.
 */
import { randomUUID } from 'node:crypto';
import {
  buildTurns,
  classifyHttpFailure,
  connectionFailure,
  embedTexts,
  parseEventData,
  postJson,
  PROVIDER_LABEL,
  readJson,
  resolveSettings,
  runRequest,
  runStream,
  usageEvent,
  type Classified,
  type HttpFailure,
  ProviderHttpError,
  type ReadFailure,
  type ResolvedSettings,
} from './core';
import type { SseMessage } from './sse';
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

export const GEMINI_DEFAULT_BASE_URL = 'https://generativelanguage.googleapis.com/v1beta';

/** A part of a Gemini `Content`, as far as the port uses it. */
export interface GeminiPart {
  text?: string;
  thought?: boolean;
  functionCall?: { id?: string; name: string; args?: Record<string, unknown> };
  functionResponse?: { name: string; response: Record<string, unknown> };
}

export interface GeminiRequestBody {
  contents: Array<{ role: 'user' | 'model'; parts: GeminiPart[] }>;
  systemInstruction?: { parts: Array<{ text: string }> };
  tools?: Array<{ functionDeclarations: Array<{ name: string; description: string; parametersJsonSchema: unknown }> }>;
  generationConfig?: { temperature?: number; maxOutputTokens?: number };
}

export class GeminiProvider implements LlmProvider {
  private readonly settings: ResolvedSettings;

  constructor(settings: LlmSettings) {
    if (settings.provider !== 'gemini')
      throw new LlmError('bad_request', `GeminiProvider cannot serve provider "${String(settings.provider)}"`);
    const resolved = resolveSettings(settings, GEMINI_DEFAULT_BASE_URL);
    if (!resolved.apiKey) throw new LlmError('bad_request', 'the gemini provider needs an apiKey');
    // A root without a version path (`https://generativelanguage.googleapis.com`) means the API's v1beta.
    const baseUrl = new URL(resolved.baseUrl).pathname === '/' ? `${resolved.baseUrl}/v1beta` : resolved.baseUrl;
    this.settings = { ...resolved, baseUrl };
  }

  stream(request: LlmRequest, options: LlmStreamOptions = {}): AsyncIterable<LlmEvent> {
    return this.run(request, options);
  }

  private async *run(request: LlmRequest, options: LlmStreamOptions): AsyncGenerator<LlmEvent> {
    const settings = this.settings;
    // Built inside the generator: a bad request fails the stream like any other error, and nothing runs before iteration.
    const model = request.model || settings.model;
    if (!model) throw new LlmError('bad_request', 'no model: set one on the request or in the provider settings', { provider: 'gemini' });
    const body = buildGeminiRequest(settings, request);
    yield* runStream({
      settings,
      signal: options.signal,
      open: (signal) => this.post(`${modelPath(model)}:streamGenerateContent?alt=sse`, body, signal),
      classify: (err) => classifyGeminiError(settings, err),
      translate: (messages) => translateGeminiStream(messages, [settings.apiKey]),
    });
  }

  async embed(request: LlmEmbedRequest, options: LlmStreamOptions = {}): Promise<LlmEmbedResult> {
    const settings = this.settings;
    const { model, input } = embedTexts(settings, request);
    const path = modelPath(model);
    const body = {
      requests: input.map((text) => ({
        model: path,
        content: { parts: [{ text }] },
        ...(request.dimensions !== undefined ? { outputDimensionality: request.dimensions } : {}),
      })),
    };
    const answer = (await runRequest(
      settings,
      options.signal,
      async (signal) => readJson('gemini', await this.post(`${path}:batchEmbedContents`, body, signal), 'embeddings', signal),
      (err) => classifyGeminiError(settings, err),
    )) as { embeddings?: Array<{ values?: unknown }>; usageMetadata?: { promptTokenCount?: number } } | null;
    const vectors = (answer?.embeddings ?? []).map((e) => e.values);
    if (vectors.length !== input.length || vectors.some((v) => !Array.isArray(v))) {
      throw new LlmError('protocol', `${PROVIDER_LABEL.gemini} answered ${vectors.length} embeddings for ${input.length} inputs`, {
        provider: 'gemini',
      });
    }
    // batchEmbedContents reports no token count: estimated at about 4 characters a token.
    const counted = answer?.usageMetadata?.promptTokenCount;
    if (typeof counted === 'number') return { vectors: vectors as number[][], inputTokens: counted };
    const chars = input.reduce((n, text) => n + text.length, 0);
    return { vectors: vectors as number[][], inputTokens: Math.ceil(chars / 4), estimated: true };
  }

  /** The shared POST (core.postJson) with the key header; a non-2xx answer is thrown with Gemini's error body read. */
  private post(path: string, body: unknown, signal: AbortSignal) {
    const { settings } = this;
    const url = `${settings.baseUrl}/${path}`;
    return postJson({ settings, url, headers: { 'x-goog-api-key': settings.apiKey! }, body, signal, readFailure: readGeminiFailure });
  }
}

/** `models/{model}` for a bare model id; a resource name (`models/...`, `tunedModels/...`) is kept. */
function modelPath(model: string): string {
  const path = /^(models|tunedModels)\//.test(model) ? model : `models/${model}`;
  return path.split('/').map(encodeURIComponent).join('/');
}

interface GeminiErrorBody {
  code?: number;
  message?: unknown;
  status?: string;
  details?: Array<{ '@type'?: string; reason?: string; retryDelay?: string }>;
}

/** Reads a Gemini error answer: its status (an invalid key is a 400 there, reported as 401), code and retry delay. */
const readGeminiFailure: ReadFailure = (status, body, headers) => {
  const parsed = body as { error?: GeminiErrorBody } | Array<{ error?: GeminiErrorBody }> | undefined;
  const error = (Array.isArray(parsed) ? parsed[0]?.error : parsed?.error) ?? {};
  return geminiFailure(status, typeof error === 'object' ? error : {}, headers);
};

function geminiFailure(status: number, error: GeminiErrorBody, headers?: HttpFailure['headers']): HttpFailure {
  const details = Array.isArray(error.details) ? error.details : [];
  const reason = details.find((d) => typeof d?.reason === 'string')?.reason;
  const delay = details.find((d) => String(d?.['@type']).endsWith('google.rpc.RetryInfo'))?.retryDelay;
  const seconds = typeof delay === 'string' ? Number.parseFloat(delay) : Number.NaN;
  // Google's RetryInfo stands in for a Retry-After the answer did not carry.
  const hinted = !headers?.get('retry-after') && !headers?.get('retry-after-ms') && Number.isFinite(seconds) && seconds >= 0;
  const retryAfterMs = hinted ? String(Math.round(seconds * 1000)) : null;
  const keyRejected = reason === 'API_KEY_INVALID' || reason === 'API_KEY_EXPIRED';
  return {
    status: keyRejected ? 401 : status,
    headers: {
      get: (name) => (name.toLowerCase() === 'retry-after-ms' && retryAfterMs !== null ? retryAfterMs : (headers?.get(name) ?? null)),
    },
    providerMessage: error.message,
    code: reason ?? error.status,
  };
}

function classifyGeminiError(settings: ResolvedSettings, err: unknown): Classified {
  if (err instanceof LlmError) return { error: err, retry: false };
  if (err instanceof ProviderHttpError) return classifyHttpFailure('gemini', err.failure, [settings.apiKey]);
  return connectionFailure('gemini', err);
}

/** Parses a tool result for `functionResponse.response`, which must be an object: JSON objects as they are, else wrapped. */
function toolResponse(content: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(content);
    if (typeof value === 'object' && value !== null && !Array.isArray(value)) return value as Record<string, unknown>;
    return { result: value };
  } catch {
    return { result: content };
  }
}

/**
 * Maps port messages onto a generateContent request: system messages join into `systemInstruction`; assistant turns
 * are `model` turns with `functionCall` parts; tool results are `functionResponse` parts (named after the call they
 * answer) in a user turn, consecutive ones together.
 */
export function buildGeminiRequest(settings: ResolvedSettings, request: LlmRequest): GeminiRequestBody {
  const provider = 'gemini' as const;
  const { system, turns } = buildTurns<GeminiPart>(provider, request.messages, {
    text: (text) => ({ text }),
    toolCall: (call) => ({ functionCall: { name: call.name, args: call.arguments } }),
    toolResult: (_id, content, name, i) => {
      if (!name) throw new LlmError('bad_request', `messages[${i}]: a tool message needs the toolCallId of an earlier call`, { provider });
      return { functionResponse: { name, response: toolResponse(content) } };
    },
  });
  const contents = turns.map((t): GeminiRequestBody['contents'][number] => ({
    role: t.role === 'assistant' ? 'model' : 'user',
    parts: t.content,
  }));
  const body: GeminiRequestBody = { contents };
  if (system.length > 0) body.systemInstruction = { parts: [{ text: system.join('\n\n') }] };
  if (request.tools && request.tools.length > 0) {
    // parametersJsonSchema takes JSON Schema as tools write it (`parameters` refuses additionalProperties, $schema...).
    body.tools = [
      {
        functionDeclarations: request.tools.map((t) => ({ name: t.name, description: t.description, parametersJsonSchema: t.parameters })),
      },
    ];
  }
  const generationConfig: NonNullable<GeminiRequestBody['generationConfig']> = {};
  const temperature = request.temperature ?? settings.temperature;
  if (temperature !== undefined) generationConfig.temperature = temperature;
  const maxTokens = request.maxTokens ?? settings.maxTokens;
  if (maxTokens !== undefined) generationConfig.maxOutputTokens = maxTokens;
  if (Object.keys(generationConfig).length > 0) body.generationConfig = generationConfig;
  return body;
}

function mapFinishReason(reason: string, hasToolCalls: boolean): LlmFinishReason {
  switch (reason) {
    case 'STOP':
    case 'FINISH_REASON_UNSPECIFIED':
      return hasToolCalls ? 'tool_calls' : 'stop';
    case 'MAX_TOKENS':
      return 'length';
    default:
      // SAFETY, RECITATION, BLOCKLIST, PROHIBITED_CONTENT, SPII, MALFORMED_FUNCTION_CALL...: Gemini ended the reply.
      return 'error';
  }
}

interface GeminiChunk {
  candidates?: Array<{ content?: { parts?: GeminiPart[] }; finishReason?: string; index?: number }>;
  usageMetadata?: {
    promptTokenCount?: number;
    candidatesTokenCount?: number;
    thoughtsTokenCount?: number;
    cachedContentTokenCount?: number;
  };
  promptFeedback?: { blockReason?: string };
  /** The model version that answered. */
  modelVersion?: string;
  error?: GeminiErrorBody;
}

/** Turns streamGenerateContent chunks into port events; requires a candidate's `finishReason` before the end. */
export async function* translateGeminiStream(
  messages: AsyncIterable<SseMessage>,
  secrets: ReadonlyArray<string | undefined> = [],
): AsyncGenerator<LlmEvent> {
  const provider = 'gemini' as const;
  let finishReason: string | undefined;
  let toolCalls = 0;
  let usage: LlmUsageEvent | undefined;

  for await (const message of messages) {
    const chunk = parseEventData(provider, message.data) as GeminiChunk;
    if (chunk.error && typeof chunk.error === 'object') {
      const status = typeof chunk.error.code === 'number' ? chunk.error.code : 500;
      throw classifyHttpFailure(provider, geminiFailure(status, chunk.error), secrets).error;
    }
    const counts = chunk.usageMetadata;
    if (counts) {
      // Cumulative; thinking tokens are billed as output.
      const output = (counts.candidatesTokenCount ?? 0) + (counts.thoughtsTokenCount ?? 0);
      usage = usageEvent(counts.promptTokenCount, output, counts.cachedContentTokenCount, chunk.modelVersion);
    }
    const candidate = chunk.candidates?.find((c) => (c.index ?? 0) === 0);
    if (!candidate) {
      if (chunk.promptFeedback?.blockReason) finishReason = 'PROMPT_BLOCKED';
      continue;
    }
    for (const part of candidate.content?.parts ?? []) {
      if (part.thought) continue;
      if (typeof part.text === 'string' && part.text !== '') yield { type: 'text', delta: part.text };
      if (part.functionCall) {
        const call = part.functionCall;
        if (typeof call.name !== 'string' || call.name === '') {
          throw new LlmError('protocol', `${PROVIDER_LABEL[provider]} sent a function call without a name`, { provider });
        }
        const args = call.args ?? {};
        if (typeof args !== 'object' || args === null || Array.isArray(args)) {
          throw new LlmError('protocol', `the arguments of tool call "${call.name}" are not a JSON object`, { provider });
        }
        toolCalls++;
        // Gemini's calls usually carry no id: one is made, unique, so tool results can be matched to their call.
        yield { type: 'tool_call', id: call.id || `call_${randomUUID()}`, name: call.name, arguments: args };
      }
    }
    if (candidate.finishReason) finishReason = candidate.finishReason;
  }
  if (finishReason === undefined) {
    throw new LlmError('protocol', `the stream from ${PROVIDER_LABEL[provider]} ended before a finishReason`, { provider });
  }
  if (usage) yield usage;
  yield { type: 'finish', reason: mapFinishReason(finishReason, toolCalls > 0) };
}
