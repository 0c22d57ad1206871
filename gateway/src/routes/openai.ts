/**
 * The OpenAI-compatible API under /v1 (CONTRACT.md 9): a tenant points an OpenAI client at the platform with one of
 * its API keys. The chat service makes the calls (as chat replies: reservations, billing, leases, per-key limits);
 * this file translates the wire formats (lib/openai-format.ts).
 */
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ServerResponse } from 'node:http';
import { AppError, isAppError } from '@svc/kit';
import type { chatV1 } from '@svc/proto';
import type { GatewayDeps } from '../deps';
import { callStream, type CallStream as CallStreamOf } from '../lib/call-stream';
import { openAiErrorBody } from '../lib/openai-error';
import { END_USER_MAX, endUserOf } from '../lib/end-user';
import { assertKeyTokens } from '../lib/key-usage';
import { tenantStreams } from '../lib/sse';
import {
  closingChunks,
  completionChunk,
  completionObject,
  firstChunkAfter,
  modelOf,
  responseObject,
  ResponseEvents,
  type CallRecord,
} from '../lib/openai-format';
import { type HandlerArgs, route } from '../lib/route';
import { Nullable, Obj, Str } from '../schemas';

const STREAM_DEADLINE_MS = 60 * 60 * 1000;
const TEXT_MAX = 1024 * 1024;
const Metadata = Type.Record(Type.String({ maxLength: 64 }), Type.String({ maxLength: 512 }), {
  maxProperties: 16,
  description: 'Up to 16 string pairs, echoed on the response; `project_id` names the project of an agent run',
});
const Any = Type.Unsafe<unknown>({});
const JsonObject = Type.Object({}, { additionalProperties: true });
const Temperature = Type.Optional(Nullable(Type.Number({ minimum: 0, maximum: 2 })));
const TopP = Type.Optional(Nullable(Type.Number({ minimum: 0, maximum: 1 })));
const MaxTokens = Type.Optional(Nullable(Type.Integer({ minimum: 1, maximum: 200_000 })));
const Penalty = Type.Optional(Nullable(Type.Number({ minimum: -2, maximum: 2 })));
const ToolChoice = Type.Optional(
  Type.Union([Type.Literal('none'), Type.Literal('auto'), Type.Literal('required'), JsonObject], {
    description: 'Passed as given on the response; `none` offers the model no tools',
  }),
);
const TextPart = Obj({
  type: Type.Union([Type.Literal('text'), Type.Literal('input_text'), Type.Literal('output_text')]),
  text: Str(0, TEXT_MAX),
  annotations: Type.Optional(Type.Array(Any, { maxItems: 100 })),
});
const Content = Type.Union([Str(0, TEXT_MAX), Type.Array(TextPart, { maxItems: 100 })]);
const Role = Type.Union(['system', 'developer', 'user', 'assistant', 'tool'].map((r) => Type.Literal(r)));
const ToolCallIn = Obj({
  id: Str(1, 200),
  type: Type.Literal('function'),
  function: Obj({ name: Str(1, 64), arguments: Str(0, TEXT_MAX) }),
});
const ChatMessage = Obj({
  role: Role,
  content: Type.Optional(Nullable(Content)),
  name: Type.Optional(Str(1, 64)),
  tool_calls: Type.Optional(Type.Array(ToolCallIn, { maxItems: 128 })),
  tool_call_id: Type.Optional(Str(1, 200)),
  refusal: Type.Optional(Nullable(Type.String({ maxLength: TEXT_MAX }))),
  annotations: Type.Optional(Type.Array(Any, { maxItems: 100 })),
});
const FunctionSpec = {
  name: Str(1, 64, { pattern: '^[A-Za-z0-9_-]+$' }),
  description: Type.Optional(Type.String({ maxLength: 4000 })),
  parameters: Type.Optional(JsonObject),
  strict: Type.Optional(Nullable(Type.Boolean())),
};

const ChatCompletionBody = Obj({
  model: Str(1, 200),
  messages: Type.Array(ChatMessage, { minItems: 1, maxItems: 2000 }),
  stream: Type.Optional(Nullable(Type.Boolean())),
  stream_options: Type.Optional(
    Nullable(Obj({ include_usage: Type.Optional(Type.Boolean()), include_obfuscation: Type.Optional(Type.Boolean()) })),
  ),
  tools: Type.Optional(Type.Array(Obj({ type: Type.Literal('function'), function: Obj(FunctionSpec) }), { maxItems: 128 })),
  tool_choice: ToolChoice,
  parallel_tool_calls: Type.Optional(Nullable(Type.Boolean())),
  temperature: Temperature,
  top_p: TopP,
  max_tokens: MaxTokens,
  max_completion_tokens: MaxTokens,
  n: Type.Optional(Nullable(Type.Integer({ minimum: 1, maximum: 1, description: 'One choice only' }))),
  stop: Type.Optional(Nullable(Type.Union([Str(1, 200), Type.Array(Str(1, 200), { maxItems: 4 })]))),
  presence_penalty: Penalty,
  frequency_penalty: Penalty,
  seed: Type.Optional(Nullable(Type.Integer())),
  user: Type.Optional(Str(0, 256)),
  safety_identifier: Type.Optional(Str(0, 256)),
  prompt_cache_key: Type.Optional(Str(0, 256)),
  metadata: Type.Optional(Nullable(Metadata)),
  store: Type.Optional(Nullable(Type.Boolean())),
});

const InputMessage = Obj({
  type: Type.Optional(Type.Literal('message')),
  role: Type.Union(['system', 'developer', 'user', 'assistant'].map((r) => Type.Literal(r))),
  content: Content,
  id: Type.Optional(Str(1, 200)),
  status: Type.Optional(Str(1, 20)),
});
const ApprovalResponse = Obj(
  {
    type: Type.Literal('agent_approval_response'),
    approval_request_id: Str(1, 100),
    approve: Type.Boolean(),
    reason: Type.Optional(Str(0, 1000)),
  },
  'Approves (or rejects) the agent_approval_request of the previous response, whose run this response then follows',
);

const ResponsesBody = Obj({
  model: Str(1, 200, { description: 'A model of GET /v1/models: the tenant\'s model, or "agent:<agentId>"' }),
  input: Type.Union([Str(1, TEXT_MAX), Type.Array(Type.Union([InputMessage, ApprovalResponse]), { minItems: 1, maxItems: 2000 })]),
  instructions: Type.Optional(Nullable(Str(0, TEXT_MAX))),
  previous_response_id: Type.Optional(Nullable(Str(1, 100))),
  conversation: Type.Optional(Nullable(Type.Union([Str(1, 100), Obj({ id: Str(1, 100) })]))),
  stream: Type.Optional(Nullable(Type.Boolean())),
  stream_options: Type.Optional(Nullable(Obj({ include_obfuscation: Type.Optional(Type.Boolean()) }))),
  background: Type.Optional(Nullable(Type.Boolean())),
  store: Type.Optional(Nullable(Type.Boolean())),
  tools: Type.Optional(Type.Array(Obj({ type: Type.Literal('function'), ...FunctionSpec }), { maxItems: 128 })),
  tool_choice: ToolChoice,
  parallel_tool_calls: Type.Optional(Nullable(Type.Boolean())),
  temperature: Temperature,
  top_p: TopP,
  max_output_tokens: MaxTokens,
  truncation: Type.Optional(Nullable(Type.Union([Type.Literal('auto'), Type.Literal('disabled')]))),
  metadata: Type.Optional(Nullable(Metadata)),
  user: Type.Optional(Str(0, 256)),
  safety_identifier: Type.Optional(Str(0, 256)),
  prompt_cache_key: Type.Optional(Str(0, 256)),
});

const ResponseObject = Type.Object(
  {
    id: Type.String(),
    object: Type.Literal('response'),
    created_at: Type.Integer(),
    status: Type.Union(['queued', 'in_progress', 'completed', 'incomplete', 'failed', 'cancelled'].map((s) => Type.Literal(s))),
    model: Type.String(),
    output: Type.Array(Any, {
      description:
        'message and function_call items as OpenAI has them, and agent_approval_request {id, run_id, agent_id, name, call_id, arguments} when an agent run waits for approval',
    }),
    conversation: Nullable(Obj({ id: Type.String() })),
    usage: Nullable(JsonObject),
    error: Nullable(Obj({ code: Type.String(), message: Type.String() })),
  },
  { additionalProperties: true },
);
const CompletionObject = Type.Object(
  { id: Type.String(), object: Type.Literal('chat.completion'), model: Type.String(), choices: Type.Array(Any), usage: JsonObject },
  { additionalProperties: true },
);
const ResponseParams = Obj({ id: Str(1, 100) });

type Body = Record<string, any>;

function textOf(content: unknown): string {
  if (content === null || content === undefined) return '';
  if (typeof content === 'string') return content;
  return (content as Array<{ text: string }>).map((p) => p.text).join('');
}

function toolsOf(body: Body, responses: boolean): chatV1.ToolSpec[] {
  if (!body.tools || body.tool_choice === 'none') return [];
  return (body.tools as Body[]).map((t) => {
    const f = responses ? t : t.function;
    return { name: f.name, description: f.description ?? '', parametersJson: f.parameters ? JSON.stringify(f.parameters) : '' };
  });
}

function baseRequest(): chatV1.StartCallRequest {
  return {
    kind: '',
    model: '',
    input: [],
    instructions: '',
    tools: [],
    temperature: undefined,
    maxOutputTokens: undefined,
    previousResponseId: '',
    conversationId: '',
    store: true,
    background: false,
    metadataJson: '',
    echoJson: '',
    approvalRequestId: '',
    approve: false,
    approvalReason: '',
    endUser: '',
  };
}

/** Resolves when the socket can take more, or is gone. */
function writable(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

type CallStream = CallStreamOf<{ event?: chatV1.CallEvent }>;
type ChatStream = AsyncIterable<{ event?: chatV1.CallEvent }> & { cancel(): void };

export function openAiRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { chat, agents } = deps.clients;
  const keepAliveMs = deps.config.sseKeepAliveMs;
  const streams = tenantStreams(deps);
  const open = new Set<{ res: ServerResponse; cancel: () => void }>();
  app.addHook('preClose', (done) => {
    for (const s of open) {
      s.cancel();
      s.res.end();
    }
    done();
  });

  /** Opens a call stream and reads its `started` event: until then a refusal is an ordinary JSON error. */
  async function begin(stream: CallStream) {
    const events = stream[Symbol.asyncIterator]();
    let first: IteratorResult<{ event?: chatV1.CallEvent }>;
    try {
      first = await events.next();
    } catch (err) {
      stream.cancel();
      throw err;
    }
    if (first.done || first.value.event?.type !== 'started') {
      stream.cancel();
      throw new AppError('SERVICE_UNAVAILABLE', 'The chat service ended the call early');
    }
    return { events, started: first.value.event.call! };
  }

  /** Reads a call to its end (its `done` record). */
  async function finish(events: AsyncIterator<{ event?: chatV1.CallEvent }>): Promise<CallRecord> {
    for (;;) {
      const next = await events.next();
      if (next.done) throw new AppError('SERVICE_UNAVAILABLE', 'The chat service ended the call before it finished');
      if (next.value.event?.type === 'done') return next.value.event.call!;
    }
  }

  /**
   * Streams server-sent events: `onEvent` turns each call event into text. A break in the stream to the chat service
   * is reported with `onBroken` (never a silent end). The tenant's open streams are capped per gateway.
   */
  async function sse(
    request: FastifyRequest,
    reply: FastifyReply,
    stream: CallStream,
    events: AsyncIterator<{ event?: chatV1.CallEvent }>,
    servedModel: string,
    onEvent: (e: chatV1.CallEvent, write: (s: string) => void) => void,
    onBroken: (e: AppError, write: (s: string) => void) => void,
    onStart?: (write: (s: string) => void) => void,
  ): Promise<void> {
    let sawDone = false;
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, {
      ...(reply.getHeaders() as Record<string, string>),
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      'x-accel-buffering': 'no',
      'x-served-model': servedModel,
      connection: 'keep-alive',
    });
    res.flushHeaders();
    const entry = { res, cancel: () => stream.cancel() };
    open.add(entry);
    res.on('close', () => stream.cancel());
    let pending = '';
    const write = (s: string) => {
      pending += s;
    };
    const flush = async () => {
      if (!pending || res.destroyed) return;
      const text = pending;
      pending = '';
      if (!res.write(text)) await writable(res);
    };
    const keepAlive = setInterval(() => res.write(': keep-alive\n\n'), keepAliveMs);
    try {
      onStart?.(write);
      await flush();
      for (;;) {
        const next = await events.next();
        if (next.done || res.destroyed) {
          if (next.done && !res.destroyed && !sawDone) onBroken(new AppError('SERVICE_UNAVAILABLE', 'The stream ended early'), write);
          break;
        }
        const e = next.value.event!;
        if (e.type === 'done') sawDone = true;
        onEvent(e, write);
        await flush();
        if (sawDone) break;
      }
    } catch (err) {
      if (!res.destroyed) {
        const e = isAppError(err) ? err : new AppError('SERVICE_UNAVAILABLE', 'The stream broke');
        if (!isAppError(err)) request.log.warn({ err, reqId: request.id }, 'openai-compatible stream broke');
        onBroken(e, write);
      }
    } finally {
      await flush().catch(() => undefined);
      clearInterval(keepAlive);
      open.delete(entry);
      if (sawDone) stream.release();
      else stream.cancel();
      res.end();
    }
  }

  const startCall = (req: chatV1.StartCallRequest, call: HandlerArgs['call']) =>
    callStream(chat.startCall(req, { ...call, deadlineMs: STREAM_DEADLINE_MS }) as unknown as ChatStream);

  route(app, {
    method: 'GET',
    url: '/v1/models',
    operationId: 'openaiListModels',
    access: 'llm:use',
    tag: 'openai',
    summary: "OpenAI-compatible: the tenant's configured model(s), and each agent as agent:<agentId> (listed when the key may read agents)",
    envelope: false,
    response: Obj({
      object: Type.Literal('list'),
      data: Type.Array(Obj({ id: Type.String(), object: Type.Literal('model'), created: Type.Integer(), owned_by: Type.String() })),
    }),
    handler: async ({ call }) => {
      const models = await chat.listModels({}, call);
      const data = models.models.map((id) => ({ id, object: 'model' as const, created: 0, owned_by: 'tenant' }));
      // Agents, when the key may read them (a key scoped to llm:use only sees the models).
      let cursor = '';
      for (let page = 0; page < 10; page++) {
        const res = await agents.listAgents({ limit: 100, cursor }, call).catch((err: unknown) => {
          if (isAppError(err) && err.code === 'FORBIDDEN') return null;
          throw err;
        });
        if (!res) break;
        for (const a of res.agents)
          data.push({ id: `agent:${a.id}`, object: 'model', created: Math.floor(Date.parse(a.createdAt) / 1000), owned_by: 'agent' });
        if (!res.nextCursor) break;
        cursor = res.nextCursor;
      }
      return { object: 'list', data };
    },
  });

  route(app, {
    method: 'POST',
    url: '/v1/chat/completions',
    operationId: 'openaiCreateChatCompletion',
    access: 'llm:use',
    tag: 'openai',
    summary:
      'OpenAI-compatible Chat Completions on the tenant\'s model: streamed (stream_options.include_usage puts usage on the last chunk) or not; function tools pass through. A stream cut after its first token ends with data: {"error": ...} and no [DONE]',
    envelope: false,
    body: ChatCompletionBody,
    response: CompletionObject,
    alsoProduces: 'text/event-stream',
    handler: async ({ body, call, principal, request, reply }) => {
      const b = body as Body;
      if (b.stream) streams.holdFor(reply);
      await assertKeyTokens(deps, principal, call, reply);
      const req: chatV1.StartCallRequest = {
        ...baseRequest(),
        kind: 'completion',
        model: b.model,
        endUser: (b.user ?? endUserOf(request)).slice(0, END_USER_MAX),
        store: false,
        input: (b.messages as Body[]).map((m) => ({
          role: m.role === 'developer' ? 'system' : m.role,
          content: textOf(m.content),
          toolCalls: ((m.tool_calls ?? []) as Body[]).map((c) => ({
            id: c.id,
            name: c.function.name,
            argumentsJson: c.function.arguments,
          })),
          toolCallId: m.tool_call_id ?? '',
        })),
        tools: toolsOf(b, false),
        temperature: b.temperature ?? undefined,
        maxOutputTokens: b.max_completion_tokens ?? b.max_tokens ?? undefined,
        metadataJson: b.metadata ? JSON.stringify(b.metadata) : '',
      };
      const stream = startCall(req, call);
      const { events, started } = await begin(stream);
      reply.header('X-Served-Model', started.servedModel || started.model);
      if (!b.stream) {
        let rec: CallRecord;
        try {
          rec = await finish(events);
        } finally {
          stream.release();
        }
        if (rec.status === 'failed' || rec.status === 'cancelled') throw callFailure(rec);
        reply.header('X-Served-Model', rec.servedModel || rec.model);
        return completionObject(rec);
      }
      const includeUsage = b.stream_options?.include_usage === true;
      const data = (o: unknown) => `data: ${JSON.stringify(o)}\n\n`;
      // The answer starts with the first token (or the end): a call that fails before any is an HTTP error, as
      // OpenAI answers it; one cut after its first token ends the stream with an error event.
      let first: IteratorResult<{ event?: chatV1.CallEvent }>;
      try {
        first = await events.next();
      } catch (err) {
        stream.cancel();
        throw err;
      }
      const e0 = first.done ? undefined : first.value.event;
      if (!e0 || (e0.type === 'done' && (e0.call!.status === 'failed' || e0.call!.status === 'cancelled'))) {
        stream.release();
        throw e0 ? callFailure(e0.call!) : new AppError('SERVICE_UNAVAILABLE', 'The chat service ended the call before it finished');
      }
      // The model that answered (a fallback's when the first failed before its first token).
      const servedModel = e0.type === 'done' ? e0.call!.servedModel : e0.servedModel || started.servedModel || started.model;
      let replayed = false;
      const rest: AsyncIterator<{ event?: chatV1.CallEvent }> = {
        next: () => {
          if (replayed) return events.next();
          replayed = true;
          return Promise.resolve(first);
        },
      };
      await sse(
        request,
        reply,
        stream,
        rest,
        servedModel,
        (e, write) => {
          if (e.type === 'delta') write(data(completionChunk(served(started, e.servedModel), { content: e.delta }, null, includeUsage)));
          else if (e.type === 'done') {
            const rec = e.call!;
            if (rec.status === 'failed' || rec.status === 'cancelled') return write(data(openAiErrorBody(callFailure(rec))));
            for (const chunk of closingChunks(rec, includeUsage)) write(data(chunk));
            write('data: [DONE]\n\n');
          }
        },
        (err, write) => write(data(openAiErrorBody(err))),
        (write) =>
          write(data(completionChunk(served(started, servedModel), { role: 'assistant', content: '', refusal: null }, null, includeUsage))),
      );
    },
  });

  route(app, {
    method: 'POST',
    url: '/v1/responses',
    operationId: 'openaiCreateResponse',
    access: 'llm:use',
    tag: 'openai',
    summary:
      'OpenAI-compatible Responses: background, stream, store, previous_response_id or conversation (a chat session). Every streamed response can be resumed with GET /v1/responses/{id}?stream=true&starting_after=N. model "agent:<id>" runs the agent (metadata.project_id names its project); a run waiting for approval ends the response with an agent_approval_request item',
    envelope: false,
    body: ResponsesBody,
    response: ResponseObject,
    alsoProduces: 'text/event-stream',
    handler: async ({ body, call, principal, request, reply }) => {
      const b = body as Body;
      const store = b.store ?? true;
      if (b.background && !store)
        throw new AppError('VALIDATION_ERROR', 'Background responses need store: true', {
          fields: [{ field: 'store', message: 'must be true with background' }],
        });
      if (b.stream) streams.holdFor(reply);
      await assertKeyTokens(deps, principal, call, reply);
      const items: Body[] = typeof b.input === 'string' ? [{ role: 'user', content: b.input }] : b.input;
      const approval = items.find((i) => i.type === 'agent_approval_response');
      const echo: Body = {};
      for (const k of ['temperature', 'top_p', 'max_output_tokens', 'tools', 'tool_choice', 'parallel_tool_calls', 'user', 'truncation'])
        if (b[k] !== undefined && b[k] !== null) echo[k] = b[k];
      const req: chatV1.StartCallRequest = {
        ...baseRequest(),
        kind: 'response',
        model: b.model,
        endUser: (b.user ?? endUserOf(request)).slice(0, END_USER_MAX),
        input: items
          .filter((i) => i.type !== 'agent_approval_response')
          .map((i) => ({ role: i.role === 'developer' ? 'system' : i.role, content: textOf(i.content), toolCalls: [], toolCallId: '' })),
        instructions: b.instructions ?? '',
        tools: toolsOf(b, true),
        temperature: b.temperature ?? undefined,
        maxOutputTokens: b.max_output_tokens ?? undefined,
        previousResponseId: b.previous_response_id ?? '',
        conversationId: typeof b.conversation === 'string' ? b.conversation : (b.conversation?.id ?? ''),
        store,
        background: b.background ?? false,
        metadataJson: JSON.stringify(b.metadata ?? {}),
        echoJson: JSON.stringify(echo),
        approvalRequestId: approval?.approval_request_id ?? '',
        approve: approval?.approve ?? false,
        approvalReason: approval?.reason ?? '',
      };
      const stream = startCall(req, call);
      const { events, started } = await begin(stream);
      reply.header('X-Served-Model', modelOf(started));
      if (!b.stream) {
        if (b.background) {
          stream.cancel(); // the response goes on; the caller polls or streams it by id
          return responseObject(started, 'queued');
        }
        let rec: CallRecord;
        try {
          rec = await finish(events);
        } finally {
          stream.release();
        }
        reply.header('X-Served-Model', modelOf(rec));
        return responseObject(rec);
      }
      await streamResponse(request, reply, stream, events, started, -1);
    },
  });

  async function streamResponse(
    request: FastifyRequest,
    reply: FastifyReply,
    stream: CallStream,
    events: AsyncIterator<{ event?: chatV1.CallEvent }>,
    started: CallRecord,
    startingAfter: number,
  ) {
    let writer: ResponseEvents | null = null;
    await sse(
      request,
      reply,
      stream,
      events,
      modelOf(started),
      (e) => {
        if (e.type === 'delta') writer!.delta(e.index, e.delta);
        else if (e.type === 'done') writer!.finish(e.call!);
      },
      // The stream to the platform broke, not the response: an unnumbered error event; resume with starting_after.
      (err, write) =>
        write(
          `event: error\ndata: ${JSON.stringify({ type: 'error', code: err.code.toLowerCase(), message: err.message, param: null })}\n\n`,
        ),
      (write) => {
        writer = new ResponseEvents(started, startingAfter, write);
        writer.start();
      },
    );
  }

  route(app, {
    method: 'GET',
    url: '/v1/responses/:id',
    operationId: 'openaiGetResponse',
    access: 'llm:use',
    tag: 'openai',
    summary:
      'OpenAI-compatible: a response; with stream=true its events as server-sent events from starting_after + 1 (any streamed response, background or not, numbered exactly as first sent)',
    envelope: false,
    params: ResponseParams,
    query: Obj({
      stream: Type.Optional(Type.Boolean()),
      starting_after: Type.Optional(Type.Integer({ minimum: -1, maximum: 100_000_000 })),
      include_obfuscation: Type.Optional(Type.Boolean()),
    }),
    response: ResponseObject,
    alsoProduces: 'text/event-stream',
    handler: async ({ params, query, call, request, reply }) => {
      if (!query.stream) {
        const rec = (await chat.getResponse({ id: params.id }, call)).call!;
        reply.header('X-Served-Model', modelOf(rec));
        return responseObject(rec);
      }
      streams.holdFor(reply);
      const startingAfter: number = query.starting_after ?? -1;
      const stream = callStream(
        chat.streamResponse(
          { id: params.id, fromChunk: firstChunkAfter(startingAfter) },
          { ...call, deadlineMs: STREAM_DEADLINE_MS },
        ) as unknown as ChatStream,
      );
      const { events, started } = await begin(stream);
      await streamResponse(request, reply, stream, events, started, startingAfter);
    },
  });

  route(app, {
    method: 'POST',
    url: '/v1/responses/:id/cancel',
    operationId: 'openaiCancelResponse',
    access: 'llm:use',
    tag: 'openai',
    summary: 'OpenAI-compatible: cancels a response in progress (any, background or not); idempotent: a finished one is answered as it is',
    envelope: false,
    params: ResponseParams,
    optionalBody: true,
    body: Obj({}),
    response: ResponseObject,
    handler: async ({ params, call, reply }) => {
      const rec = (await chat.cancelResponse({ id: params.id }, call)).call!;
      reply.header('X-Served-Model', modelOf(rec));
      return responseObject(rec);
    },
  });
}

/** The record with the model that served it as reported by a delta (the first-choice model until one answered). */
function served(rec: CallRecord, model: string): CallRecord {
  return model && model !== rec.servedModel ? { ...rec, servedModel: model } : rec;
}

/** A call that failed, as an error of the API: the provider's failure is a 503 naming its code. */
function callFailure(rec: CallRecord): AppError {
  return new AppError('SERVICE_UNAVAILABLE', rec.errorMessage || 'The model call failed', {
    reason: (rec.errorCode || 'llm_unavailable').toLowerCase(),
  });
}
