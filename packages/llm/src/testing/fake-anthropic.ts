/**
 * A fake Anthropic Messages server on loopback, speaking the real wire format: `POST /v1/messages` with `x-api-key`
 * and `anthropic-version` headers, answered with `event: message_start` / `content_block_start` / `ping` /
 * `content_block_delta` (`text_delta`, `input_json_delta`) / `content_block_stop` / `message_delta` (stop_reason,
 * usage.output_tokens) / `message_stop`, or one `message` object without `stream`. Errors use the API's
 * `{"type":"error","error":{"type","message"}}` body. Usable as a local "LLM provider" in end-to-end tests.
 */
import {
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

export type FakeAnthropicOptions = FakeServerOptions;

const ERROR_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  500: 'api_error',
  504: 'timeout_error',
  529: 'overloaded_error',
};
const DEFAULT_ERROR_MESSAGES: Record<string, string> = {
  invalid_request_error: 'Invalid request.',
  authentication_error: 'invalid x-api-key',
  permission_error: 'Your API key does not have permission to use the specified resource.',
  not_found_error: 'Not found.',
  request_too_large: 'Request exceeds the maximum allowed number of bytes.',
  rate_limit_error: 'Number of request tokens has exceeded your per-minute rate limit.',
  api_error: 'Internal server error',
  timeout_error: 'Request timed out.',
  overloaded_error: 'Overloaded',
};

function sendError(ctx: FakeContext, status: number, message?: string, code?: string, headers: Record<string, string> = {}): void {
  const type = code ?? ERROR_TYPES[status] ?? 'api_error';
  const requestId = `req_fake_${ctx.serial()}`;
  sendJson(
    ctx.res,
    status,
    { type: 'error', error: { type, message: message ?? DEFAULT_ERROR_MESSAGES[type] ?? `Error ${status}.` }, request_id: requestId },
    { 'request-id': requestId, ...headers },
  );
}

function blocksText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((b) =>
      b && typeof b === 'object' && (b as { type?: unknown }).type === 'text' ? String((b as { text?: unknown }).text ?? '') : '',
    )
    .join('');
}

/** Checks a Messages request like the real API does; returns the neutral view or an error message. */
function readConversation(body: unknown): FakeConversation | string {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return 'The request body is not valid JSON.';
  const b = body as Record<string, unknown>;
  if (typeof b.model !== 'string' || b.model === '') return 'model: Field required';
  if (typeof b.max_tokens !== 'number') return 'max_tokens: Field required';
  if (!Array.isArray(b.messages) || b.messages.length === 0) return 'messages: at least one message is required';
  const messages: FakeMessage[] = [];
  for (const [i, raw] of b.messages.entries()) {
    const m = raw as Record<string, unknown>;
    if (m?.role !== 'user' && m?.role !== 'assistant') {
      return `messages.${i}.role: Unexpected role "${String(m?.role)}". The Messages API accepts a top-level \`system\` parameter, not "system" as an input message role.`;
    }
    if (typeof m.content === 'string') {
      messages.push({ role: m.role, text: m.content });
      continue;
    }
    if (!Array.isArray(m.content)) return `messages.${i}.content: Input should be a valid list`;
    const calls: Array<{ id: string; name: string; arguments: string }> = [];
    let text = '';
    for (const [j, block] of (m.content as Array<Record<string, unknown>>).entries()) {
      if (block?.type === 'text') {
        if (typeof block.text !== 'string' || block.text === '')
          return `messages.${i}.content.${j}.text: text content blocks must be non-empty`;
        text += block.text;
      } else if (block?.type === 'tool_use' && m.role === 'assistant') {
        calls.push({ id: String(block.id ?? ''), name: String(block.name ?? ''), arguments: JSON.stringify(block.input ?? {}) });
      } else if (block?.type === 'tool_result' && m.role === 'user') {
        messages.push({ role: 'tool', text: blocksText(block.content), toolCallId: String(block.tool_use_id ?? '') });
      } else {
        return `messages.${i}.content.${j}: unsupported content block type "${String(block?.type)}" for role ${m.role}`;
      }
    }
    if (text !== '' || calls.length > 0) messages.push({ role: m.role, text, ...(calls.length > 0 ? { toolCalls: calls } : {}) });
  }
  const tools = Array.isArray(b.tools) ? (b.tools as Array<{ name?: string }>).map((t) => String(t.name ?? '')) : [];
  return { model: b.model, stream: b.stream === true, system: blocksText(b.system), messages, tools };
}

const STOP_REASONS: Record<ReplyPlan['finishReason'], string> = { stop: 'end_turn', length: 'max_tokens', tool_calls: 'tool_use' };

function sse(event: string, data: unknown): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

function streamEvents(ctx: FakeContext, conversation: FakeConversation, reply: ReplyPlan): string[] {
  const events: string[] = [];
  events.push(
    sse('message_start', {
      type: 'message_start',
      message: {
        id: `msg_fake_${ctx.serial()}`,
        type: 'message',
        role: 'assistant',
        model: conversation.model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: {
          input_tokens: reply.usage.input - reply.usage.cached,
          cache_creation_input_tokens: 0,
          cache_read_input_tokens: reply.usage.cached,
          output_tokens: 1,
        },
      },
    }),
  );
  events.push(sse('ping', { type: 'ping' }));
  let index = 0;
  if (reply.textPieces.length > 0) {
    events.push(sse('content_block_start', { type: 'content_block_start', index, content_block: { type: 'text', text: '' } }));
    for (const piece of reply.textPieces) {
      events.push(sse('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'text_delta', text: piece } }));
    }
    events.push(sse('content_block_stop', { type: 'content_block_stop', index }));
    index++;
  }
  for (const call of reply.toolCalls) {
    events.push(
      sse('content_block_start', {
        type: 'content_block_start',
        index,
        content_block: { type: 'tool_use', id: call.id, name: call.name, input: {} },
      }),
    );
    // The API opens each tool input with an empty partial_json.
    for (const piece of ['', ...call.pieces]) {
      events.push(
        sse('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: piece } }),
      );
    }
    events.push(sse('content_block_stop', { type: 'content_block_stop', index }));
    index++;
  }
  events.push(
    sse('message_delta', {
      type: 'message_delta',
      delta: { stop_reason: STOP_REASONS[reply.finishReason], stop_sequence: null },
      usage: { output_tokens: reply.usage.output },
    }),
  );
  events.push(sse('message_stop', { type: 'message_stop' }));
  return events;
}

function message(ctx: FakeContext, conversation: FakeConversation, reply: ReplyPlan): Record<string, unknown> {
  const content: Array<Record<string, unknown>> = [];
  if (reply.text !== '') content.push({ type: 'text', text: reply.text });
  for (const call of reply.toolCalls) {
    let input: unknown;
    try {
      input = JSON.parse(call.json);
    } catch {
      input = call.json;
    }
    content.push({ type: 'tool_use', id: call.id, name: call.name, input });
  }
  return {
    id: `msg_fake_${ctx.serial()}`,
    type: 'message',
    role: 'assistant',
    model: conversation.model,
    content,
    stop_reason: STOP_REASONS[reply.finishReason],
    stop_sequence: null,
    usage: {
      input_tokens: reply.usage.input - reply.usage.cached,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: reply.usage.cached,
      output_tokens: reply.usage.output,
    },
  };
}

async function respond(ctx: FakeContext, conversation: FakeConversation): Promise<void> {
  const behaviour = ctx.next();
  const { res } = ctx;
  const requestId = { 'request-id': `req_fake_${ctx.serial()}` };
  switch (behaviour.type) {
    case 'error':
      sendError(ctx, behaviour.status, behaviour.message, behaviour.code, retryAfterHeader(behaviour));
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
  const reply = planReply(ctx, conversation, behaviour, 'toolu_fake_');
  const delayMs = behaviour.type === 'cut' ? undefined : behaviour.delayMs;
  if (!conversation.stream) {
    const text = JSON.stringify(message(ctx, conversation, reply));
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
  const events = streamEvents(ctx, conversation, reply);
  if (behaviour.type === 'cut') {
    await writeEvents(res, events.slice(0, -1), { cutAfter: behaviour.afterChunks, cutMode: behaviour.mode });
  } else {
    await writeEvents(res, events, { delayMs });
  }
}

/** Starts a fake Anthropic server; `url` is `http://127.0.0.1:<port>` (the client appends `/v1/messages`). */
export function startFakeAnthropic(options: FakeAnthropicOptions = {}): Promise<FakeProviderServer> {
  return startFakeServer(
    options,
    (origin) => origin,
    async (ctx) => {
      const { req, record } = ctx;
      const path = record.path.split('?')[0];
      const key = req.headers['x-api-key'];
      if (typeof key !== 'string' || key === '') {
        sendError(ctx, 401, 'x-api-key header is required');
        return;
      }
      if (options.apiKey !== undefined && key !== options.apiKey) {
        sendError(ctx, 401, 'invalid x-api-key');
        return;
      }
      if (!req.headers['anthropic-version']) {
        sendError(ctx, 400, 'anthropic-version: header is required');
        return;
      }
      if (req.method !== 'POST' || path !== '/v1/messages') {
        sendError(ctx, 404, `Not found: ${req.method} ${path}`);
        return;
      }
      const conversation = readConversation(record.body);
      if (typeof conversation === 'string') {
        sendError(ctx, 400, conversation);
        return;
      }
      record.conversation = conversation;
      await respond(ctx, conversation);
    },
  );
}
