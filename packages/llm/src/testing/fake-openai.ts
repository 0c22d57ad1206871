/**
 * A fake OpenAI Chat Completions server on loopback, speaking the real wire format: `POST {basePath}/chat/completions`
 * answered with `data: {chat.completion.chunk}` SSE lines (text in `choices[0].delta.content`, tool calls as
 * `delta.tool_calls[{index, id, type, function: {name, arguments}}]` split over chunks, `finish_reason`, a final usage
 * chunk when `stream_options.include_usage`, then `data: [DONE]`), or one `chat.completion` object without `stream`.
 * Also `GET {basePath}/models`, `POST {basePath}/embeddings` and `GET {basePath}/responses/{id}` (a stored response). Usable as a local "LLM provider" in end-to-end tests and benchmarks.
 */
import {
  estimateTokens,
  fakeEmbedding,
  maskKey,
  planReply,
  retryAfterHeader,
  sendJson,
  sleep,
  startFakeServer,
  startSse,
  waitForClose,
  writeEvents,
  writeFlushed,
  type FakeContext,
  type FakeConversation,
  type FakeMessage,
  type FakeProviderServer,
  type FakeServerOptions,
  type ReplyPlan,
} from './fake-server';

export interface FakeOpenAIOptions extends FakeServerOptions {
  /** Path prefix, the version path of `url`. Default `/v1`. */
  basePath?: string;
}

const FAKE_CREATED = 1_700_000_000;
const DEFAULT_ERROR_MESSAGES: Record<number, string> = {
  400: 'Invalid request.',
  401: 'Incorrect API key provided.',
  403: 'You are not allowed to sample from this model.',
  404: 'The model does not exist or you do not have access to it.',
  429: 'Rate limit reached for requests. Please try again shortly.',
  500: 'The server had an error while processing your request. Sorry about that!',
  502: 'Bad gateway.',
  503: 'The engine is currently overloaded, please try again later.',
};

function errorType(status: number): { type: string; code: string | null } {
  if (status === 401) return { type: 'invalid_request_error', code: 'invalid_api_key' };
  if (status === 429) return { type: 'requests', code: 'rate_limit_exceeded' };
  if (status >= 500) return { type: 'server_error', code: null };
  if (status === 404) return { type: 'invalid_request_error', code: 'model_not_found' };
  return { type: 'invalid_request_error', code: null };
}

export type SendError = (ctx: FakeContext, status: number, message?: string, code?: string, headers?: Record<string, string>) => void;

function sendError(ctx: FakeContext, status: number, message?: string, code?: string, headers: Record<string, string> = {}): void {
  const kind = errorType(status);
  sendJson(
    ctx.res,
    status,
    {
      error: {
        message: message ?? DEFAULT_ERROR_MESSAGES[status] ?? `Error ${status}.`,
        type: kind.type,
        param: null,
        code: code ?? kind.code,
      },
    },
    { 'x-request-id': `req_fake_${ctx.serial()}`, ...headers },
  );
}

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((part) =>
        part && typeof part === 'object' && typeof (part as { text?: unknown }).text === 'string' ? (part as { text: string }).text : '',
      )
      .join('');
  }
  return '';
}

/** Checks a chat request like the real API does; returns the neutral view or an error message. */
export function readConversation(body: unknown): FakeConversation | string {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return 'We could not parse the JSON body of your request.';
  const b = body as Record<string, unknown>;
  if (typeof b.model !== 'string' || b.model === '') return 'you must provide a model parameter';
  if (!Array.isArray(b.messages) || b.messages.length === 0)
    return "Invalid 'messages': empty array. Expected an array with minimum length 1.";
  const system: string[] = [];
  const messages: FakeMessage[] = [];
  for (const [i, raw] of b.messages.entries()) {
    const m = raw as Record<string, unknown>;
    const role = m?.role;
    if (role === 'system' || role === 'developer') {
      system.push(textOf(m.content));
    } else if (role === 'user') {
      messages.push({ role: 'user', text: textOf(m.content) });
    } else if (role === 'assistant') {
      const calls = Array.isArray(m.tool_calls)
        ? (m.tool_calls as Array<{ id?: string; function?: { name?: string; arguments?: string } }>).map((c) => ({
            id: String(c.id ?? ''),
            name: String(c.function?.name ?? ''),
            arguments: String(c.function?.arguments ?? ''),
          }))
        : undefined;
      messages.push({ role: 'assistant', text: textOf(m.content), ...(calls ? { toolCalls: calls } : {}) });
    } else if (role === 'tool') {
      if (typeof m.tool_call_id !== 'string')
        return `Missing parameter 'tool_call_id': messages[${i}] with role 'tool' must have a 'tool_call_id'.`;
      messages.push({ role: 'tool', text: textOf(m.content), toolCallId: m.tool_call_id });
    } else {
      return `Invalid value for 'messages[${i}].role'.`;
    }
  }
  const tools = Array.isArray(b.tools)
    ? (b.tools as Array<{ function?: { name?: string } }>).map((t) => String(t.function?.name ?? ''))
    : [];
  return { model: b.model, stream: b.stream === true, system: system.join('\n\n'), messages, tools };
}

function streamEvents(ctx: FakeContext, conversation: FakeConversation, reply: ReplyPlan, includeUsage: boolean): string[] {
  const id = `chatcmpl-fake${ctx.serial()}`;
  const chunk = (delta: Record<string, unknown>, finishReason: string | null = null): string =>
    `data: ${JSON.stringify({
      id,
      object: 'chat.completion.chunk',
      created: FAKE_CREATED,
      model: conversation.model,
      system_fingerprint: 'fp_fake',
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
      ...(includeUsage ? { usage: null } : {}),
    })}\n\n`;
  const events: string[] = [];
  const hasTools = reply.toolCalls.length > 0;
  events.push(chunk({ role: 'assistant', content: hasTools && reply.text === '' ? null : '', refusal: null }));
  for (const piece of reply.textPieces) events.push(chunk({ content: piece }));
  reply.toolCalls.forEach((call, index) => {
    events.push(chunk({ tool_calls: [{ index, id: call.id, type: 'function', function: { name: call.name, arguments: '' } }] }));
    for (const piece of call.pieces) events.push(chunk({ tool_calls: [{ index, function: { arguments: piece } }] }));
  });
  events.push(chunk({}, reply.finishReason));
  if (includeUsage) {
    events.push(
      `data: ${JSON.stringify({
        id,
        object: 'chat.completion.chunk',
        created: FAKE_CREATED,
        model: conversation.model,
        system_fingerprint: 'fp_fake',
        choices: [],
        usage: {
          prompt_tokens: reply.usage.input,
          completion_tokens: reply.usage.output,
          total_tokens: reply.usage.input + reply.usage.output,
          prompt_tokens_details: { cached_tokens: reply.usage.cached, audio_tokens: 0 },
          completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
        },
      })}\n\n`,
    );
  }
  events.push('data: [DONE]\n\n');
  return events;
}

function completion(ctx: FakeContext, conversation: FakeConversation, reply: ReplyPlan): Record<string, unknown> {
  const message: Record<string, unknown> = {
    role: 'assistant',
    content: reply.text === '' && reply.toolCalls.length > 0 ? null : reply.text,
    refusal: null,
  };
  if (reply.toolCalls.length > 0) {
    message.tool_calls = reply.toolCalls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.json } }));
  }
  return {
    id: `chatcmpl-fake${ctx.serial()}`,
    object: 'chat.completion',
    created: FAKE_CREATED,
    model: conversation.model,
    system_fingerprint: 'fp_fake',
    choices: [{ index: 0, message, logprobs: null, finish_reason: reply.finishReason }],
    usage: {
      prompt_tokens: reply.usage.input,
      completion_tokens: reply.usage.output,
      total_tokens: reply.usage.input + reply.usage.output,
    },
  };
}

/** Answers a chat request (shared with the Azure fake, which has its own error body). */
export async function chat(ctx: FakeContext, conversation: FakeConversation, sendErr: SendError = sendError): Promise<void> {
  const behaviour = ctx.next();
  const { res } = ctx;
  const requestId = { 'x-request-id': `req_fake_${ctx.serial()}` };
  const body = ctx.record.body as { stream_options?: { include_usage?: unknown } };
  const includeUsage = body.stream_options?.include_usage === true;

  switch (behaviour.type) {
    case 'error':
      sendErr(ctx, behaviour.status, behaviour.message, behaviour.code, retryAfterHeader(behaviour));
      return;
    case 'raw':
      res.writeHead(behaviour.status ?? 200, { 'content-type': 'text/event-stream; charset=utf-8', ...requestId, ...behaviour.headers });
      res.end(behaviour.body);
      return;
    case 'hang':
      if (behaviour.stage !== 'headers') startSse(res, requestId);
      await waitForClose(res);
      return;
    default:
      break;
  }
  const reply = planReply(ctx, conversation, behaviour);
  const delayMs = behaviour.type === 'cut' ? undefined : behaviour.delayMs;
  if (!conversation.stream) {
    const text = JSON.stringify(completion(ctx, conversation, reply));
    if (behaviour.type === 'cut') {
      res.writeHead(200, { 'content-type': 'application/json', ...requestId });
      await writeEvents(res, [text.slice(0, Math.floor(text.length / 2))], { cutAfter: 1, cutMode: behaviour.mode });
      return;
    }
    if (delayMs) await new Promise((resolve) => setTimeout(resolve, delayMs));
    sendJson(res, 200, JSON.parse(text), requestId);
    return;
  }
  startSse(res, requestId);
  const events = streamEvents(ctx, conversation, reply, includeUsage);
  if (behaviour.type === 'cut') {
    await writeEvents(res, events.slice(0, -1), { cutAfter: behaviour.afterChunks, cutMode: behaviour.mode });
  } else if (behaviour.type === 'text' && behaviour.holdEndMs) {
    for (const event of events.slice(0, -1)) {
      if (delayMs) await sleep(delayMs);
      if (!(await writeFlushed(res, event))) return;
    }
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([new Promise((resolve) => (timer = setTimeout(resolve, behaviour.holdEndMs))), waitForClose(res)]);
    clearTimeout(timer);
    await writeEvents(res, events.slice(-1));
  } else {
    await writeEvents(res, events, { delayMs });
  }
}

const isTokens = (v: unknown): v is number[] => Array.isArray(v) && v.length > 0 && v.every((t) => Number.isInteger(t));

/** OpenAI's forms of `input`: a string, strings, one token array, or token arrays; null for anything else. */
function embeddingInputs(input: unknown): Array<string | number[]> | null {
  if (typeof input === 'string') return [input];
  if (isTokens(input)) return [input];
  if (!Array.isArray(input) || input.length === 0) return null;
  return input.every((i) => typeof i === 'string') || input.every(isTokens) ? (input as Array<string | number[]>) : null;
}

/**
 * `POST /embeddings`: one deterministic vector per input (a string, strings or token arrays; {@link fakeEmbedding},
 * `dimensions` long), with usage (`prompt_tokens` = the fakes' token count of the inputs), as OpenAI answers. A
 * scripted `error` or `hang` at the head of the script applies to it.
 */
export async function embeddings(ctx: FakeContext, sendErr: SendError = sendError): Promise<void> {
  const failure = ctx.nextFailure();
  if (failure?.type === 'error') return sendErr(ctx, failure.status, failure.message, failure.code, retryAfterHeader(failure));
  if (failure?.type === 'hang') return waitForClose(ctx.res);
  const body = ctx.record.body as { input?: unknown; model?: unknown; dimensions?: unknown } | undefined;
  const inputs = embeddingInputs(body?.input);
  if (!inputs || typeof body?.model !== 'string') {
    sendErr(ctx, 400, "'input' must be a string, an array of strings or of token arrays, and 'model' a string");
    return;
  }
  const dimensions = typeof body.dimensions === 'number' ? body.dimensions : undefined;
  // A token array counts its length; its vector is the fakes' embedding of its ids joined by spaces.
  const tokens = inputs.reduce((n: number, i) => n + (typeof i === 'string' ? estimateTokens(i) : i.length), 0);
  sendJson(ctx.res, 200, {
    object: 'list',
    data: inputs.map((i, index) => ({
      object: 'embedding',
      index,
      embedding: fakeEmbedding(typeof i === 'string' ? i : i.join(' '), dimensions),
    })),
    model: body.model,
    usage: { prompt_tokens: tokens, total_tokens: tokens },
  });
}

/** `GET /responses/{id}`: a stored Responses API response, with the usage it was billed for when it was created. */
function storedResponse(ctx: FakeContext, id: string): void {
  sendJson(ctx.res, 200, {
    id,
    object: 'response',
    created_at: FAKE_CREATED,
    status: 'completed',
    model: 'gpt-fake-responses',
    output: [
      { type: 'message', id: `msg_${id}`, role: 'assistant', content: [{ type: 'output_text', text: 'Stored answer.', annotations: [] }] },
    ],
    usage: { input_tokens: 20, output_tokens: 10, total_tokens: 30 },
  });
}

/** Starts a fake OpenAI server; `url` is `http://127.0.0.1:<port>/v1` (with `basePath`). */
export function startFakeOpenAI(options: FakeOpenAIOptions = {}): Promise<FakeProviderServer> {
  const basePath = (options.basePath ?? '/v1').replace(/\/+$/, '');
  return startFakeServer(
    options,
    (origin) => `${origin}${basePath}`,
    async (ctx) => {
      const { req, record } = ctx;
      const path = record.path.split('?')[0];
      if (options.apiKey !== undefined) {
        const auth = req.headers.authorization;
        if (!auth) {
          sendError(
            ctx,
            401,
            "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth.",
          );
          return;
        }
        if (auth !== `Bearer ${options.apiKey}`) {
          sendError(
            ctx,
            401,
            `Incorrect API key provided: ${maskKey(auth.replace(/^Bearer\s+/i, ''))}. You can find your API key at https://platform.openai.com/account/api-keys.`,
          );
          return;
        }
      }
      if (req.method === 'GET' && path === `${basePath}/models`) {
        sendJson(ctx.res, 200, { object: 'list', data: [{ id: 'fake-model', object: 'model', created: FAKE_CREATED, owned_by: 'fake' }] });
        return;
      }
      const stored = new RegExp(`^${basePath}/responses/([\\w-]+)$`).exec(path);
      if (req.method === 'GET' && stored) {
        storedResponse(ctx, stored[1]);
        return;
      }
      if (req.method === 'POST' && path === `${basePath}/embeddings`) {
        await embeddings(ctx);
        return;
      }
      if (req.method !== 'POST' || path !== `${basePath}/chat/completions`) {
        sendError(ctx, 404, `Invalid URL (${req.method} ${path})`, 'unknown_url');
        return;
      }
      const conversation = readConversation(record.body);
      if (typeof conversation === 'string') {
        sendError(ctx, 400, conversation);
        return;
      }
      record.conversation = conversation;
      await chat(ctx, conversation);
    },
  );
}
