/**
 * What every OpenAI-compatible route shares: starting a call on the chat service and reading its events (the
 * `started` record, then deltas to the `done` record), and relaying them as server-sent events.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError, isAppError, type ServerStream } from '@svc/kit';
import type { chatV1 } from '@svc/proto';
import type { GatewayDeps } from '../../deps';
import type { CallRecord } from '../../lib/openai-format';
import type { HandlerArgs } from '../../lib/route';
import { firstEvent, openStreams } from '../../lib/sse';
import type { Body } from './schemas';

const STREAM_DEADLINE_MS = 60 * 60 * 1000;

export function textOf(content: unknown): string {
  if (content === null || content === undefined) return '';
  if (typeof content === 'string') return content;
  return (content as Array<{ text: string }>).map((p) => p.text).join('');
}

export function toolsOf(body: Body, responses: boolean): chatV1.ToolSpec[] {
  if (!body.tools || body.tool_choice === 'none') return [];
  return (body.tools as Body[]).map((t) => {
    const f = responses ? t : t.function;
    return { name: f.name, description: f.description ?? '', parametersJson: f.parameters ? JSON.stringify(f.parameters) : '' };
  });
}

export function baseRequest(): chatV1.StartCallRequest {
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
    finalOnly: false,
  };
}

/**
 * A call's events from the chat service: `release()` once its `done` event has been read (the service ends the call
 * itself), `cancel()` when it is given up before (its client went away: a completion is then stopped, a response
 * goes on). Neither resets the gRPC stream (kit's ServerStream).
 */
export type CallStream = ServerStream<{ event?: chatV1.CallEvent }>;

export type CallRelay = ReturnType<typeof callRelay>;

/** The call helpers of one gateway app; streams still open when the app closes are cancelled and ended. */
export function callRelay(app: FastifyInstance, deps: GatewayDeps) {
  const { chat } = deps.clients;
  const keepAliveMs = deps.config.sseKeepAliveMs;
  const open = openStreams(app);

  /** Opens a call stream and reads its `started` event: until then a refusal is an ordinary JSON error. */
  async function begin(stream: CallStream) {
    const { first, events } = await firstEvent(stream, (m) => m.event?.type === 'started', 'The chat service ended the call early');
    return { events, started: first.event!.call! };
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
   * is reported with `onBroken` (never a silent end). The tenant's open streams are capped per gateway. `firstInHand`:
   * the first event has come already (`events` gives it at once), so the headers and `onStart`'s opening leave with
   * it in one write instead of three.
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
    firstInHand = false,
  ): Promise<void> {
    let sawDone = false;
    // Ended before its `done` (its client gone, a break, the gateway closing), the call is cancelled.
    const writer = open.sse(reply, keepAliveMs, () => stream.cancel(), { 'x-served-model': servedModel }, firstInHand);
    const res = writer.res;
    let pending = '';
    const write = (s: string) => {
      pending += s;
    };
    const flush = async () => {
      if (!pending || res.destroyed) return;
      const text = pending;
      pending = '';
      await writer.write(text);
    };
    try {
      onStart?.(write);
      if (!firstInHand) await flush();
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
      // Its `done` read, the call ends by itself (the writer's cancel then does nothing).
      if (sawDone) stream.release();
      writer.end();
    }
  }

  const startCall = (req: chatV1.StartCallRequest, call: HandlerArgs['call']) =>
    chat.startCall(req, { ...call, deadlineMs: STREAM_DEADLINE_MS });

  return { begin, finish, sse, startCall, streamDeadlineMs: STREAM_DEADLINE_MS };
}

/** The record with the model that served it as reported by a delta (the first-choice model until one answered). */
export function served(rec: CallRecord, model: string): CallRecord {
  return model && model !== rec.servedModel ? { ...rec, servedModel: model } : rec;
}

/** A call that failed, as an error of the API: the provider's failure is a 503 naming its code. */
export function callFailure(rec: CallRecord): AppError {
  return new AppError('SERVICE_UNAVAILABLE', rec.errorMessage || 'The model call failed', {
    reason: (rec.errorCode || 'llm_unavailable').toLowerCase(),
  });
}
