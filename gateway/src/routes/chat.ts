import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError, errors, isAppError } from '@svc/kit';
import type { chatV1 } from '@svc/proto';
import type { GatewayDeps } from '../deps';
import { endUserOf } from '../lib/end-user';
import { assertKeyTokens } from '../lib/key-usage';
import { firstEvent, openStreams, sseEvent, tenantStreams } from '../lib/sse';
import { type HandlerArgs, pageOf, route } from '../lib/route';
import { IdParams, Nullable, Obj, PageQuery, Str, Timestamp } from '../schemas';

const Session = Obj({
  id: Type.String(),
  projectId: Nullable(Type.String()),
  agentId: Nullable(Type.String()),
  title: Nullable(Type.String()),
  model: Nullable(Type.String(), { description: "The catalogue name its replies use (null: the tenant's default model)" }),
  createdAt: Timestamp,
});

const Message = Obj({
  id: Type.String(),
  sessionId: Type.String(),
  role: Type.Union([Type.Literal('user'), Type.Literal('assistant')]),
  content: Type.String(),
  projectId: Nullable(Type.String()),
  status: Type.Union(['pending', 'streaming', 'completed', 'failed'].map((s) => Type.Literal(s))),
  error: Nullable(Obj({ code: Type.String(), message: Type.String() })),
  usage: Nullable(Obj({ inputTokens: Type.Integer(), outputTokens: Type.Integer() })),
  model: Nullable(Type.String(), {
    description: "assistant replies: the model that served it (a fallback's when the main model failed before answering)",
  }),
  createdAt: Timestamp,
  completedAt: Nullable(Timestamp),
});

const Id = Str(1, 100);
const ModelName = Str(1, 100, {
  description:
    "A catalogue name (GET /api/v1/models) or the default model's; 404 RESOURCE_NOT_FOUND with details.reason model_not_found otherwise",
});

/** A stream may stay open this long (a long reply, or a reader waiting on one). */
const STREAM_DEADLINE_MS = 60 * 60 * 1000;

export function sessionView(s: chatV1.Session) {
  return {
    id: s.id,
    projectId: s.projectId || null,
    agentId: s.agentId || null,
    title: s.title || null,
    model: s.model || null,
    createdAt: s.createdAt,
  };
}

export function messageView(m: chatV1.Message) {
  return {
    id: m.id,
    sessionId: m.sessionId,
    role: m.role as 'user' | 'assistant',
    content: m.content,
    projectId: m.projectId || null,
    status: m.status,
    error: m.errorCode ? { code: m.errorCode, message: m.errorMessage } : null,
    usage: m.usage ? { inputTokens: m.usage.inputTokens, outputTokens: m.usage.outputTokens } : null,
    model: m.model || null,
    createdAt: m.createdAt,
    completedAt: m.completedAt || null,
  };
}

function sseOf(e: chatV1.StreamReplyResponse): string {
  switch (e.type) {
    case 'message.delta':
      return sseEvent(e.id, e.type, { messageId: e.messageId, delta: e.delta });
    case 'message.completed':
      return sseEvent(e.id, e.type, { message: messageView(e.message!) });
    default:
      return sseEvent(e.id, 'error', { code: e.errorCode, message: e.errorMessage });
  }
}

export function chatRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { chat } = deps.clients;
  const keepAliveMs = deps.config.sseKeepAliveMs;
  /** Open streams, ended when the gateway closes (an open SSE response would hold the server open). */
  const open = openStreams(app);
  /** Open streams per tenant, one count with the other SSE routes (lib/sse.ts). */
  const streams = tenantStreams(deps);

  route(app, {
    method: 'POST',
    url: '/api/v1/chat/sessions',
    operationId: 'createChatSession',
    access: 'agents:write',
    tag: 'chat',
    summary: 'Create a chat session, optionally about a project and with an agent (its system prompt leads the conversation)',
    status: 201,
    body: Obj({
      projectId: Type.Optional(Id),
      agentId: Type.Optional(Id),
      title: Type.Optional(Type.String({ maxLength: 200 })),
      model: Type.Optional(ModelName),
    }),
    response: Session,
    handler: async ({ body, call, request }) =>
      sessionView(
        (
          await chat.createSession(
            {
              projectId: body.projectId ?? '',
              agentId: body.agentId ?? '',
              title: body.title ?? '',
              model: body.model ?? '',
              endUser: endUserOf(request),
            },
            call,
          )
        ).session!,
      ),
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/chat/sessions',
    operationId: 'listChatSessions',
    access: 'agents:read',
    tag: 'chat',
    summary: 'Chat sessions, newest first',
    query: PageQuery,
    list: true,
    response: Session,
    handler: async ({ query, call }) => {
      const res = await chat.listSessions({ limit: query.limit, cursor: query.cursor ?? '' }, call);
      return pageOf(res.sessions.map(sessionView), query.limit, res.nextCursor);
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/chat/sessions/:id',
    operationId: 'getChatSession',
    access: 'agents:read',
    tag: 'chat',
    summary: 'One chat session',
    params: IdParams,
    response: Session,
    handler: async ({ params, call }) => sessionView((await chat.getSession({ id: params.id }, call)).session!),
  });

  route(app, {
    method: 'DELETE',
    url: '/api/v1/chat/sessions/:id',
    operationId: 'deleteChatSession',
    access: 'agents:write',
    tag: 'chat',
    summary: 'Delete a chat session and its messages (409 while a reply is being generated)',
    params: IdParams,
    response: Obj({ id: Type.String(), deleted: Type.Boolean() }),
    handler: async ({ params, call }) => ({ id: (await chat.deleteSession({ id: params.id }, call)).id, deleted: true }),
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/chat/sessions/:id/messages',
    operationId: 'listChatMessages',
    access: 'agents:read',
    tag: 'chat',
    summary: 'The messages of a session, oldest first (a transcript); assistant replies carry status, error and token usage',
    params: IdParams,
    query: PageQuery,
    list: true,
    response: Message,
    handler: async ({ params, query, call }) => {
      const res = await chat.listMessages({ sessionId: params.id, limit: query.limit, cursor: query.cursor ?? '' }, call);
      return pageOf(res.messages.map(messageView), query.limit, res.nextCursor);
    },
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/chat/sessions/:id/messages',
    operationId: 'sendChatMessage',
    modelCall: true,
    access: 'agents:write',
    tag: 'chat',
    summary: 'Send a message; the reply is generated in the background (read it with the stream or the message list)',
    status: 202,
    params: IdParams,
    body: Obj({
      content: Str(1, 32_000),
      projectId: Type.Optional(Id),
      model: Type.Optional({ ...ModelName, description: "This reply's model, in place of the session's" }),
    }),
    response: Obj({ message: Message, responseMessageId: Type.String() }),
    handler: async ({ params, body, call, principal, request, reply }) => {
      await assertKeyTokens(deps, principal, call, reply);
      const res = await chat.postMessage(
        {
          sessionId: params.id,
          content: body.content,
          projectId: body.projectId ?? '',
          model: body.model ?? '',
          endUser: endUserOf(request),
        },
        call,
      );
      return { message: messageView(res.message!), responseMessageId: res.responseMessageId };
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/chat/sessions/:id/stream',
    operationId: 'streamChatReply',
    access: 'agents:read',
    tag: 'chat',
    summary:
      'The reply to the latest message as server-sent events: message.delta {messageId, delta}..., then message.completed {message} or error {code, message}. Last-Event-ID (or ?lastEventId=) resumes; a finished reply is replayed.',
    params: IdParams,
    query: Obj({ lastEventId: Type.Optional(Str(1, 200)) }),
    produces: 'text/event-stream',
    handler: async ({ params, query, call, request, reply }) => {
      const header = request.headers['last-event-id'];
      const lastEventId = typeof header === 'string' && header !== '' ? header : (query.lastEventId ?? '');
      if (lastEventId.length > 200) throw errors.validation([{ field: 'Last-Event-ID', message: 'must be at most 200 characters' }]);
      streams.holdFor(reply);
      await relay(params.id, lastEventId, call, request, reply);
    },
  });

  async function relay(sessionId: string, lastEventId: string, call: HandlerArgs['call'], request: FastifyRequest, reply: FastifyReply) {
    const stream = chat.streamReply({ sessionId, afterEventId: lastEventId }, { ...call, deadlineMs: STREAM_DEADLINE_MS });
    // The service answers `open` once the request is accepted: until then, refusals are ordinary JSON errors.
    const { first, events } = await firstEvent(stream, (m) => m.type === 'open', 'The chat service ended the stream early');
    let lastId = `${first.messageId}:0`;

    // A reader that goes away stops its relay, never the reply (the chat service finishes and stores it).
    const writer = open.sse(reply, keepAliveMs, () => stream.cancel());
    const res = writer.res;
    // A reader resuming after the final event has it already: the service answers `open` and nothing more.
    let finished = lastEventId.endsWith(':end');
    try {
      for (;;) {
        const next = await events.next();
        if (next.done || res.destroyed) break;
        lastId = next.value.id;
        if (next.value.type === 'message.completed' || next.value.type === 'error') finished = true;
        // Backpressure: stop pulling from gRPC until the client has taken what was written.
        await writer.write(sseOf(next.value));
      }
      // Never a silent end (CONTRACT.md 5, 9): a stream that stops before its final event says so, and the reader
      // can resume with the last id it got.
      if (!finished && !res.destroyed)
        res.write(
          sseEvent(lastId, 'error', {
            code: 'SERVICE_UNAVAILABLE',
            message: 'The reply stream ended before the reply finished; reconnect with Last-Event-ID to resume',
          }),
        );
    } catch (err) {
      if (!res.destroyed) {
        const e = isAppError(err) ? err : new AppError('INTERNAL_ERROR', 'Internal server error');
        if (!isAppError(err)) request.log.error({ err, reqId: request.id }, 'chat stream failed');
        res.write(sseEvent(lastId, 'error', { code: e.code, message: e.httpStatus === 500 ? 'Internal server error' : e.message }));
      }
    } finally {
      writer.end();
    }
  }
}
