/**
 * A fake Gemini API (generativelanguage.googleapis.com) on loopback, speaking its wire format:
 * `POST {basePath}/models/{model}:streamGenerateContent?alt=sse` answered with `data: {GenerateContentResponse}` SSE
 * events (text parts, whole `functionCall` parts, cumulative `usageMetadata`, the candidate's `finishReason` on the
 * last one; no end marker), `:generateContent` answered with one response, `:batchEmbedContents` and
 * `:embedContent`. The key comes in `x-goog-api-key` (or `?key=`); a wrong one is a 400 `API_KEY_INVALID`, as Google
 * answers. Errors use `{"error": {"code", "message", "status", "details"}}`; a 429 carries a `RetryInfo` detail.
 */
import {
  fakeEmbedding,
  planReply,
  retryAfterHeader,
  sendJson,
  startFakeServer,
  startSse,
  waitForClose,
  writeEvents,
  type FakeContext,
  type FakeConversation,
  type FakeMessage,
  type FakeProviderServer,
  type FakeServerOptions,
  type ReplyPlan,
} from './fake-server';

export interface FakeGeminiOptions extends FakeServerOptions {
  /** The version path of `url`. Default `/v1beta`. */
  basePath?: string;
}

const STATUS_NAMES: Record<number, string> = {
  400: 'INVALID_ARGUMENT',
  401: 'UNAUTHENTICATED',
  403: 'PERMISSION_DENIED',
  404: 'NOT_FOUND',
  429: 'RESOURCE_EXHAUSTED',
  500: 'INTERNAL',
  503: 'UNAVAILABLE',
  504: 'DEADLINE_EXCEEDED',
};

function sendError(
  ctx: FakeContext,
  status: number,
  message?: string,
  details: unknown[] = [],
  headers: Record<string, string> = {},
): void {
  sendJson(
    ctx.res,
    status,
    { error: { code: status, message: message ?? `Error ${status}.`, status: STATUS_NAMES[status] ?? 'UNKNOWN', details } },
    headers,
  );
}

function partsText(parts: unknown): string {
  if (!Array.isArray(parts)) return '';
  return parts.map((p) => (p && typeof (p as { text?: unknown }).text === 'string' ? (p as { text: string }).text : '')).join('');
}

/** Checks a generateContent request like the API does; returns the neutral view or an error message. */
function readConversation(model: string, stream: boolean, body: unknown): FakeConversation | string {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return 'Invalid JSON payload received.';
  const b = body as Record<string, unknown>;
  if (!Array.isArray(b.contents) || b.contents.length === 0) return '* GenerateContentRequest.contents: contents is not specified';
  const messages: FakeMessage[] = [];
  for (const [i, raw] of b.contents.entries()) {
    const c = raw as { role?: unknown; parts?: unknown };
    if (c?.role !== 'user' && c?.role !== 'model') return `Please use a valid role: user, model. (contents[${i}])`;
    if (!Array.isArray(c.parts) || c.parts.length === 0)
      return `* GenerateContentRequest.contents[${i}].parts: contents.parts must not be empty.`;
    const parts = c.parts as Array<{
      text?: string;
      functionCall?: { name?: string; args?: unknown };
      functionResponse?: { name?: string; response?: unknown };
    }>;
    if (c.role === 'model') {
      const calls = parts
        .filter((p) => p.functionCall)
        .map((p) => ({ id: '', name: String(p.functionCall!.name ?? ''), arguments: JSON.stringify(p.functionCall!.args ?? {}) }));
      messages.push({ role: 'assistant', text: partsText(parts), ...(calls.length > 0 ? { toolCalls: calls } : {}) });
      continue;
    }
    for (const p of parts) {
      if (p.functionResponse) {
        if (typeof p.functionResponse.response !== 'object' || p.functionResponse.response === null) {
          return `* GenerateContentRequest.contents[${i}].parts: functionResponse.response must be an object`;
        }
        messages.push({
          role: 'tool',
          text: JSON.stringify(p.functionResponse.response),
          toolCallId: String(p.functionResponse.name ?? ''),
        });
      }
    }
    const text = partsText(parts);
    if (parts.some((p) => typeof p.text === 'string')) messages.push({ role: 'user', text });
  }
  const system = partsText((b.systemInstruction as { parts?: unknown } | undefined)?.parts);
  const tools = Array.isArray(b.tools)
    ? (b.tools as Array<{ functionDeclarations?: Array<{ name?: string }> }>).flatMap((t) =>
        (t.functionDeclarations ?? []).map((d) => String(d.name ?? '')),
      )
    : [];
  return { model, stream, system, messages, tools };
}

function usageMetadata(reply: ReplyPlan, final: boolean): Record<string, number> {
  const output = final ? reply.usage.output : 0;
  return {
    promptTokenCount: reply.usage.input,
    ...(final ? { candidatesTokenCount: output } : {}),
    totalTokenCount: reply.usage.input + output,
    ...(reply.usage.cached > 0 ? { cachedContentTokenCount: reply.usage.cached } : {}),
  };
}

const FINISH: Record<ReplyPlan['finishReason'], string> = { stop: 'STOP', tool_calls: 'STOP', length: 'MAX_TOKENS' };

/** The reply's chunks: one per text piece, the function calls in one, the finishReason and final usage on the last. */
function chunks(conversation: FakeConversation, reply: ReplyPlan, responseId: string): Array<Record<string, unknown>> {
  const parts: Array<Record<string, unknown>[]> = reply.textPieces.map((text) => [{ text }]);
  if (reply.toolCalls.length > 0) {
    parts.push(reply.toolCalls.map((c) => ({ functionCall: { name: c.name, args: c.args } })));
  }
  if (parts.length === 0) parts.push([{ text: '' }]);
  return parts.map((p, i) => {
    const last = i === parts.length - 1;
    return {
      candidates: [{ content: { parts: p, role: 'model' }, index: 0, ...(last ? { finishReason: FINISH[reply.finishReason] } : {}) }],
      usageMetadata: usageMetadata(reply, last),
      modelVersion: conversation.model,
      responseId,
    };
  });
}

async function generate(ctx: FakeContext, conversation: FakeConversation): Promise<void> {
  const behaviour = ctx.next();
  const { res } = ctx;
  switch (behaviour.type) {
    case 'error': {
      const details =
        behaviour.status === 429
          ? [{ '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: `${behaviour.retryAfter ?? 0}s` }]
          : [];
      sendError(ctx, behaviour.status, behaviour.message, details, retryAfterHeader(behaviour));
      return;
    }
    case 'raw':
      res.writeHead(behaviour.status ?? 200, { 'content-type': 'text/event-stream', ...behaviour.headers });
      res.end(behaviour.body);
      return;
    case 'hang':
      if (behaviour.stage !== 'headers') startSse(res, {});
      await waitForClose(res);
      return;
    default:
      break;
  }
  const reply = planReply(ctx, conversation, behaviour);
  const list = chunks(conversation, reply, `fake-${ctx.serial()}`);
  if (!conversation.stream) {
    if (behaviour.type !== 'cut' && behaviour.delayMs) await new Promise((resolve) => setTimeout(resolve, behaviour.delayMs));
    const whole = list[list.length - 1];
    const candidate = (whole.candidates as Array<Record<string, unknown>>)[0];
    const parts = list.flatMap((c) => (c.candidates as Array<{ content: { parts: unknown[] } }>)[0].content.parts);
    sendJson(res, 200, { ...whole, candidates: [{ ...candidate, content: { parts, role: 'model' } }] });
    return;
  }
  startSse(res, {});
  const events = list.map((c) => `data: ${JSON.stringify(c)}\r\n\r\n`);
  if (behaviour.type === 'cut') {
    await writeEvents(res, events.slice(0, -1), { cutAfter: behaviour.afterChunks, cutMode: behaviour.mode });
  } else {
    await writeEvents(res, events, { delayMs: behaviour.delayMs });
  }
}

async function embed(ctx: FakeContext, model: string, batch: boolean): Promise<void> {
  const failure = ctx.nextFailure();
  if (failure?.type === 'error') return sendError(ctx, failure.status, failure.message, [], retryAfterHeader(failure));
  if (failure?.type === 'hang') return waitForClose(ctx.res);
  type One = { model?: unknown; content?: { parts?: unknown }; outputDimensionality?: unknown };
  const body = ctx.record.body as { requests?: One[] } & One;
  const requests = batch ? body?.requests : [body];
  if (!Array.isArray(requests) || requests.length === 0)
    return sendError(ctx, 400, '* BatchEmbedContentsRequest.requests: requests is not specified');
  const vectors: Array<{ values: number[] }> = [];
  for (const r of requests) {
    if (batch && r?.model !== `models/${model}`)
      return sendError(ctx, 400, `* BatchEmbedContentsRequest.model: the request's model must be models/${model}`);
    const text = partsText(r?.content?.parts);
    const dims = typeof r?.outputDimensionality === 'number' ? r.outputDimensionality : undefined;
    vectors.push({ values: fakeEmbedding(text, dims) });
  }
  sendJson(ctx.res, 200, batch ? { embeddings: vectors } : { embedding: vectors[0] });
}

/** Starts a fake Gemini API; `url` is `http://127.0.0.1:<port>/v1beta` (with `basePath`). */
export function startFakeGemini(options: FakeGeminiOptions = {}): Promise<FakeProviderServer> {
  const basePath = (options.basePath ?? '/v1beta').replace(/\/+$/, '');
  return startFakeServer(
    options,
    (origin) => `${origin}${basePath}`,
    async (ctx) => {
      const { req, record } = ctx;
      const url = new URL(record.path, 'http://fake');
      if (options.apiKey !== undefined) {
        const key = req.headers['x-goog-api-key'] ?? url.searchParams.get('key');
        if (!key)
          return sendError(
            ctx,
            403,
            "Method doesn't allow unregistered callers. Please use API Key or other form of API consumer identity to call this API.",
          );
        if (key !== options.apiKey) {
          return sendError(ctx, 400, 'API key not valid. Please pass a valid API key.', [
            { '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason: 'API_KEY_INVALID', domain: 'googleapis.com' },
          ]);
        }
      }
      const route = new RegExp(
        `^${basePath}/models/([^/:]+):(streamGenerateContent|generateContent|batchEmbedContents|embedContent)$`,
      ).exec(url.pathname);
      if (req.method !== 'POST' || !route) return sendError(ctx, 404, `Invalid URL (${req.method} ${url.pathname})`);
      const model = decodeURIComponent(route[1]);
      if (route[2] === 'batchEmbedContents' || route[2] === 'embedContent') return embed(ctx, model, route[2] === 'batchEmbedContents');
      const stream = route[2] === 'streamGenerateContent';
      if (stream && url.searchParams.get('alt') !== 'sse') return sendError(ctx, 400, 'this fake streams only with alt=sse');
      const conversation = readConversation(model, stream, record.body);
      if (typeof conversation === 'string') return sendError(ctx, 400, conversation);
      record.conversation = conversation;
      await generate(ctx, conversation);
    },
  );
}
