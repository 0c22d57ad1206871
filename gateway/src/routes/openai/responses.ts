/**
 * The Responses API: POST /v1/responses (background, stored, on a model or an agent), GET /v1/responses/{id} (also
 * as a resumed stream), POST /v1/responses/{id}/cancel.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '@svc/kit';
import type { chatV1 } from '@svc/proto';
import type { GatewayDeps } from '../../deps';
import { END_USER_MAX, endUserOf } from '../../lib/end-user';
import { assertKeyTokens } from '../../lib/key-usage';
import { tenantStreams } from '../../lib/sse';
import { firstChunkAfter, modelOf, responseObject, ResponseEvents, type CallRecord } from '../../lib/openai-format';
import { route } from '../../lib/route';
import { Obj } from '../../schemas';
import { baseRequest, type CallRelay, type CallStream, textOf, toolsOf } from './call-relay';
import { type Body, ResponseObject, ResponseParams, ResponsesBody } from './schemas';

export function responsesRoutes(app: FastifyInstance, deps: GatewayDeps, relay: CallRelay): void {
  const { chat } = deps.clients;
  const { begin, finish, sse, startCall, streamDeadlineMs } = relay;
  const streams = tenantStreams(deps);

  route(app, {
    method: 'POST',
    url: '/v1/responses',
    operationId: 'openaiCreateResponse',
    modelCall: true,
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
        // Not streamed (nor in the background): only the `done` record is read.
        finalOnly: !b.stream && !b.background,
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
      const stream = chat.streamResponse(
        { id: params.id, fromChunk: firstChunkAfter(startingAfter) },
        { ...call, deadlineMs: streamDeadlineMs },
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
