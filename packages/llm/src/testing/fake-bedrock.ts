/**
 * A fake Amazon Bedrock runtime on loopback, speaking its wire protocol: `POST /model/{modelId}/converse-stream`
 * answered with `application/vnd.amazon.eventstream` frames (encoded by the SDK's own `EventStreamCodec`, never by
 * hand: `messageStart`, `contentBlockStart` with `toolUse`, `contentBlockDelta` with `text` or `toolUse.input`,
 * `contentBlockStop`, `messageStop`, `metadata` with usage), `/converse` with one JSON answer, and
 * `/model/{modelId}/invoke` as Titan text embeddings v2 (`{inputText, dimensions}` -> `{embedding,
 * inputTextTokenCount}`). Errors are `{"message"}` bodies with `x-amzn-errortype`, as the service answers.
 *
 * Requests must be signed: a SigV4 `Authorization` header of the right shape (algorithm, credential scope for the
 * region and the `bedrock` service, signed headers including host and x-amz-date, a 64-hex signature) with an
 * `x-amz-date`, or `Authorization: Bearer <Bedrock API key>`. The signature itself is not recomputed.
 * A scripted `raw` body is base64 (binary frames: see {@link bedrockEventFrame}, {@link bedrockExceptionFrame}).
 */
import type { EventStreamCodec } from '@smithy/core/event-streams';
import {
  fakeEmbedding,
  estimateTokens,
  planReply,
  retryAfterHeader,
  sendJson,
  startFakeServer,
  waitForClose,
  writeEvents,
  type FakeContext,
  type FakeConversation,
  type FakeMessage,
  type FakeProviderServer,
  type FakeServerOptions,
  type ReplyPlan,
} from './fake-server';

export interface FakeBedrockOptions extends Omit<FakeServerOptions, 'apiKey'> {
  /** The region requests must be signed for. Default `us-east-1`. */
  region?: string;
  /** When set, SigV4 requests must be signed with this access key id. */
  accessKeyId?: string;
  /** When set, bearer requests must carry this Bedrock API key (without it, bearer requests are refused). */
  apiKey?: string;
}

const ERROR_TYPES: Record<number, string> = {
  400: 'ValidationException',
  403: 'AccessDeniedException',
  404: 'ResourceNotFoundException',
  408: 'ModelTimeoutException',
  429: 'ThrottlingException',
  500: 'InternalServerException',
  503: 'ServiceUnavailableException',
};

let codecInstance: EventStreamCodec | undefined;
/** The SDK's codec, loaded on first use (tests that import the fakes but not this one do not pay for it). */
function codec(): EventStreamCodec {
  if (!codecInstance) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { EventStreamCodec: Codec } = require('@smithy/core/event-streams') as typeof import('@smithy/core/event-streams');
    codecInstance = new Codec(
      (bytes) => Buffer.from(bytes).toString('utf8'),
      (text) => new Uint8Array(Buffer.from(text, 'utf8')),
    );
  }
  return codecInstance;
}

function sendError(ctx: FakeContext, status: number, message?: string, type?: string, headers: Record<string, string> = {}): void {
  const errorType = type ?? ERROR_TYPES[status] ?? 'InternalServerException';
  sendJson(
    ctx.res,
    status,
    { message: message ?? `${errorType} (fake)` },
    {
      'x-amzn-errortype': `${errorType}:http://internal.amazon.com/coral/com.amazon.bedrock/`,
      'x-amzn-requestid': `fake-req-${ctx.serial()}`,
      ...headers,
    },
  );
}

const SIGV4 =
  /^AWS4-HMAC-SHA256 Credential=([A-Za-z0-9]+)\/(\d{8})\/([a-z0-9-]+)\/([a-z0-9-]+)\/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$/;

/** Why the request's authentication is refused, or null when it passes. */
function authProblem(headers: Record<string, string | string[] | undefined>, options: FakeBedrockOptions): string | null {
  const auth = String(headers.authorization ?? '');
  if (auth.startsWith('Bearer ')) {
    if (options.apiKey === undefined || auth.slice(7) !== options.apiKey) return 'The security token included in the request is invalid.';
    return null;
  }
  const m = SIGV4.exec(auth);
  if (!m) return 'Missing Authentication Token';
  const [, accessKeyId, day, region, service, signed] = m;
  const date = String(headers['x-amz-date'] ?? '');
  if (!/^\d{8}T\d{6}Z$/.test(date) || date.slice(0, 8) !== day) return 'x-amz-date is missing or does not match the credential scope';
  if (service !== 'bedrock' || region !== (options.region ?? 'us-east-1'))
    return `Credential should be scoped to a valid region and service: ${region}/${service}`;
  const signedHeaders = signed.split(';');
  if (!signedHeaders.includes('host') || !signedHeaders.includes('x-amz-date')) return 'host and x-amz-date must be signed';
  if (options.accessKeyId !== undefined && accessKeyId !== options.accessKeyId)
    return 'The security token included in the request is invalid.';
  return null;
}

function textOf(content: unknown): string {
  if (!Array.isArray(content)) return '';
  return content.map((b) => (b && typeof (b as { text?: unknown }).text === 'string' ? (b as { text: string }).text : '')).join('');
}

/** Checks a Converse request like the service does; returns the neutral view or an error message. */
function readConversation(model: string, stream: boolean, body: unknown): FakeConversation | string {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return 'Malformed input request.';
  const b = body as Record<string, unknown>;
  if (!Array.isArray(b.messages) || b.messages.length === 0) return 'A conversation must start with a user message.';
  const messages: FakeMessage[] = [];
  for (const [i, raw] of b.messages.entries()) {
    const m = raw as { role?: unknown; content?: unknown };
    if (m?.role !== 'user' && m?.role !== 'assistant') return `messages.${i}.role: must be user or assistant`;
    if (!Array.isArray(m.content) || m.content.length === 0) return `messages.${i}.content: must not be empty`;
    const blocks = m.content as Array<{
      text?: string;
      toolUse?: { toolUseId?: string; name?: string; input?: unknown };
      toolResult?: { toolUseId?: string; content?: unknown };
    }>;
    if (m.role === 'assistant') {
      const calls = blocks
        .filter((x) => x.toolUse)
        .map((x) => ({
          id: String(x.toolUse!.toolUseId ?? ''),
          name: String(x.toolUse!.name ?? ''),
          arguments: JSON.stringify(x.toolUse!.input ?? {}),
        }));
      messages.push({ role: 'assistant', text: textOf(blocks), ...(calls.length > 0 ? { toolCalls: calls } : {}) });
      continue;
    }
    for (const x of blocks) {
      if (x.toolResult)
        messages.push({ role: 'tool', text: textOf(x.toolResult.content), toolCallId: String(x.toolResult.toolUseId ?? '') });
    }
    if (blocks.some((x) => typeof x.text === 'string')) messages.push({ role: 'user', text: textOf(blocks) });
  }
  const system = textOf(b.system);
  const toolConfig = b.toolConfig as { tools?: Array<{ toolSpec?: { name?: string } }> } | undefined;
  const tools = (toolConfig?.tools ?? []).map((t) => String(t.toolSpec?.name ?? ''));
  return { model, stream, system, messages, tools };
}

const STOP: Record<ReplyPlan['finishReason'], string> = { stop: 'end_turn', tool_calls: 'tool_use', length: 'max_tokens' };

function usageOf(reply: ReplyPlan): Record<string, number> {
  const { input, output, cached } = reply.usage;
  return {
    // Bedrock counts cache reads apart from inputTokens.
    inputTokens: input - cached,
    outputTokens: output,
    totalTokens: input + output,
    ...(cached > 0 ? { cacheReadInputTokens: cached, cacheWriteInputTokens: 0 } : {}),
  };
}

/** One ConverseStream event frame (`:message-type: event`), for scripting `raw` replies. */
export function bedrockEventFrame(eventType: string, payload: unknown): Uint8Array {
  return codec().encode({
    headers: {
      ':event-type': { type: 'string', value: eventType },
      ':content-type': { type: 'string', value: 'application/json' },
      ':message-type': { type: 'string', value: 'event' },
    },
    body: new Uint8Array(Buffer.from(JSON.stringify(payload), 'utf8')),
  });
}

/** An exception sent inside the event stream (after the 200), as the service does for throttling mid-stream. */
export function bedrockExceptionFrame(exceptionType: string, message: string): Uint8Array {
  return codec().encode({
    headers: {
      ':exception-type': { type: 'string', value: exceptionType },
      ':content-type': { type: 'string', value: 'application/json' },
      ':message-type': { type: 'string', value: 'exception' },
    },
    body: new Uint8Array(Buffer.from(JSON.stringify({ message }), 'utf8')),
  });
}

/** The ConverseStream frames of a reply (what follows `messageStop` is `metadata`, with the usage). */
function streamFrames(reply: ReplyPlan): Uint8Array[] {
  const frames = [bedrockEventFrame('messageStart', { role: 'assistant' })];
  let index = 0;
  if (reply.textPieces.length > 0) {
    for (const text of reply.textPieces)
      frames.push(bedrockEventFrame('contentBlockDelta', { contentBlockIndex: index, delta: { text }, p: 'abcdefgh' }));
    frames.push(bedrockEventFrame('contentBlockStop', { contentBlockIndex: index }));
    index++;
  }
  for (const call of reply.toolCalls) {
    frames.push(
      bedrockEventFrame('contentBlockStart', { contentBlockIndex: index, start: { toolUse: { toolUseId: call.id, name: call.name } } }),
    );
    for (const piece of call.pieces)
      frames.push(bedrockEventFrame('contentBlockDelta', { contentBlockIndex: index, delta: { toolUse: { input: piece } } }));
    frames.push(bedrockEventFrame('contentBlockStop', { contentBlockIndex: index }));
    index++;
  }
  frames.push(bedrockEventFrame('messageStop', { stopReason: STOP[reply.finishReason] }));
  frames.push(bedrockEventFrame('metadata', { usage: usageOf(reply), metrics: { latencyMs: 42 } }));
  return frames;
}

function converseAnswer(reply: ReplyPlan): Record<string, unknown> {
  const content: unknown[] = [];
  if (reply.text !== '') content.push({ text: reply.text });
  for (const call of reply.toolCalls) content.push({ toolUse: { toolUseId: call.id, name: call.name, input: call.args } });
  return {
    output: { message: { role: 'assistant', content } },
    stopReason: STOP[reply.finishReason],
    usage: usageOf(reply),
    metrics: { latencyMs: 42 },
  };
}

async function converse(ctx: FakeContext, conversation: FakeConversation): Promise<void> {
  const behaviour = ctx.next();
  const { res } = ctx;
  const requestId = { 'x-amzn-requestid': `fake-req-${ctx.serial()}` };
  switch (behaviour.type) {
    case 'error':
      sendError(ctx, behaviour.status, behaviour.message, behaviour.code, retryAfterHeader(behaviour));
      return;
    case 'raw':
      res.writeHead(behaviour.status ?? 200, { 'content-type': 'application/vnd.amazon.eventstream', ...requestId, ...behaviour.headers });
      res.end(Buffer.from(behaviour.body, 'base64'));
      return;
    case 'hang':
      if (behaviour.stage !== 'headers') {
        res.writeHead(200, { 'content-type': 'application/vnd.amazon.eventstream', ...requestId });
        res.flushHeaders();
      }
      await waitForClose(res);
      return;
    default:
      break;
  }
  const reply = planReply(ctx, conversation, behaviour, 'tooluse_fake_');
  if (!conversation.stream) {
    if (behaviour.type !== 'cut' && behaviour.delayMs) await new Promise((resolve) => setTimeout(resolve, behaviour.delayMs));
    sendJson(res, 200, converseAnswer(reply), requestId);
    return;
  }
  res.writeHead(200, { 'content-type': 'application/vnd.amazon.eventstream', ...requestId });
  res.flushHeaders();
  const frames = streamFrames(reply);
  if (behaviour.type === 'cut') {
    await writeEvents(res, frames.slice(0, -2), { cutAfter: behaviour.afterChunks, cutMode: behaviour.mode });
  } else {
    await writeEvents(res, frames, { delayMs: behaviour.delayMs });
  }
}

/** Titan text embeddings v2: one text per call. */
async function invoke(ctx: FakeContext, model: string): Promise<void> {
  const failure = ctx.nextFailure();
  if (failure?.type === 'error') return sendError(ctx, failure.status, failure.message, failure.code, retryAfterHeader(failure));
  if (failure?.type === 'hang') return waitForClose(ctx.res);
  if (!/^amazon\.titan-embed-text/.test(model)) return sendError(ctx, 400, `The fake invokes only Titan text embeddings, not ${model}`);
  const body = ctx.record.body as { inputText?: unknown; dimensions?: unknown } | undefined;
  if (typeof body?.inputText !== 'string') return sendError(ctx, 400, 'Malformed input request: #: required key [inputText] not found');
  const dims = typeof body.dimensions === 'number' ? body.dimensions : 1024;
  if (![256, 512, 1024].includes(dims)) return sendError(ctx, 400, 'Malformed input request: #/dimensions: 3 is not a valid enum value');
  const tokens = estimateTokens(body.inputText);
  sendJson(
    ctx.res,
    200,
    { embedding: fakeEmbedding(body.inputText, dims), embeddingsByType: {}, inputTextTokenCount: tokens },
    {
      'x-amzn-bedrock-input-token-count': String(tokens),
    },
  );
}

/** Starts a fake Bedrock runtime; `url` is its endpoint `http://127.0.0.1:<port>` (the settings' `baseUrl`). */
export function startFakeBedrock(options: FakeBedrockOptions = {}): Promise<FakeProviderServer> {
  return startFakeServer(
    { host: options.host, port: options.port },
    (origin) => origin,
    async (ctx) => {
      const { req, record } = ctx;
      const problem = authProblem(req.headers, options);
      if (problem) return sendError(ctx, 403, problem, 'UnrecognizedClientException');
      const route = /^\/model\/([^/]+)\/(converse-stream|converse|invoke)$/.exec(record.path.split('?')[0]);
      if (req.method !== 'POST' || !route) return sendError(ctx, 404, 'Not Found', 'UnknownOperationException');
      const model = decodeURIComponent(route[1]);
      if (route[2] === 'invoke') return invoke(ctx, model);
      const conversation = readConversation(model, route[2] === 'converse-stream', record.body);
      if (typeof conversation === 'string') return sendError(ctx, 400, conversation);
      record.conversation = conversation;
      await converse(ctx, conversation);
    },
  );
}
