/** POST /v1/chat/completions: a chat completion on the tenant's model, streamed or not. */
import type { FastifyInstance } from 'fastify';
import { AppError } from '@svc/kit';
import type { chatV1 } from '@svc/proto';
import type { GatewayDeps } from '../../deps';
import { openAiErrorBody } from '../../lib/openai-error';
import { END_USER_MAX, endUserOf } from '../../lib/end-user';
import { assertKeyTokens } from '../../lib/key-usage';
import { tenantStreams } from '../../lib/sse';
import { closingChunks, completionChunk, completionObject, type CallRecord } from '../../lib/openai-format';
import { route } from '../../lib/route';
import { baseRequest, callFailure, type CallRelay, served, textOf, toolsOf } from './call-relay';
import { type Body, ChatCompletionBody, CompletionObject } from './schemas';

export function chatCompletionsRoute(app: FastifyInstance, deps: GatewayDeps, relay: CallRelay): void {
  const { begin, finish, sse, startCall } = relay;
  const streams = tenantStreams(deps);

  route(app, {
    method: 'POST',
    url: '/v1/chat/completions',
    operationId: 'openaiCreateChatCompletion',
    modelCall: true,
    access: 'llm:use',
    tag: 'openai',
    summary:
      'OpenAI-compatible Chat Completions on the tenant\'s model: streamed (stream_options.include_usage puts usage on the last chunk) or not; function tools pass through. A stream cut after its first token ends with data: {"error": ...} and no [DONE]. model "agent:<id>" runs the agent (metadata.project_id names its project; the user messages are its goal) and answers its output; a run waiting for approval answers finish_reason "stop" with message.agent_approval_request {id, run_id, agent_id, name, call_id, arguments}',
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
        // Not streamed: only the `done` record is read (a reply's chunks would each be a message for nothing).
        finalOnly: !b.stream,
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
      // (A read that throws has ended the call already: kit's ServerStream.)
      const first = await events.next();
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
        // `rest` gives the first event at once: the headers, the role chunk and the first token leave together.
        true,
      );
    },
  });
}
