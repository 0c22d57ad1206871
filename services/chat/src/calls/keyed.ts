/**
 * A `/v1` model call under an Idempotency-Key (CONTRACT.md 14) is started once per key, whichever chat process a
 * retry reaches. The key's record (kit idempotency, operation `startCall`) commits with the call's pending reply,
 * before any model is called, and answers with the reply's id and response; the transaction that ends the reply adds
 * the reply as it ended (replies.ts). A retry with the key (the gateway lets one through after a 5xx) then:
 * - replays the ended call from that record, its chunks and record as the first caller got them, calling no model
 *   and billing nothing (a call cut by a crash ends failed, `REPLY_INTERRUPTED`, billed once by the replies' sweep);
 * - answers 409 `idempotency_key_in_progress` while the reply has not ended (its generator may have died and the
 *   sweep not failed it yet);
 * - runs afresh when the call did nothing: the model refused before answering (the record was deleted then).
 */
import { type AuthedContext, idempotencyErrors, idempotencyRecordId, idempotent } from '@svc/kit';
import type { chatV1 } from '@svc/proto';
import type { MessageDoc, ResponseDoc } from '../collections';
import type { ReplyStart } from '../start-reply';
import { event, recordOf, type Send, TERMINAL } from './records';
import type { CallDeps, CallParts } from './shared';

/** What a key's record answers: the call's reply and response, and the reply as it ended once it has. */
export interface KeyedCall {
  messageId: string;
  resp: ResponseDoc | null;
  final?: MessageDoc;
}

/** How a call started under a key stores its reply: marked with the record's id, committed with its answer. */
export interface KeyedStart {
  /** The scoped key itself (for work the call asks of another service under it). */
  key: string;
  idempotencyId: string;
  commit(answer: KeyedCall): NonNullable<ReplyStart['commit']>;
}

/** A call just started, for its caller to follow. */
export interface StartedCall {
  resp: ResponseDoc | null;
  reply: MessageDoc;
  /** A response goes on when its caller leaves; a chat completion is stopped. */
  durable: boolean;
}

const OPERATION = 'startCall';

export function keyedCalls(deps: CallDeps, parts: CallParts) {
  const { follow, fromStore, messagesCol } = parts;

  async function replay(answer: KeyedCall, send: Send, signal: AbortSignal): Promise<void> {
    const ended = answer.final ?? (await messagesCol.get(answer.messageId));
    if (!ended || !TERMINAL.has(ended.status)) throw idempotencyErrors.inProgress();
    await send(event('started', { call: recordOf(answer.resp, ended) }));
    await fromStore(answer.resp, ended, 0, send, signal);
  }

  /** Starts a call (once per Idempotency-Key) and follows it to its end, or replays the call the key started. */
  return async function startOnce(
    c: AuthedContext,
    req: chatV1.StartCallRequest,
    key: string | null | undefined,
    begin: (keyed: KeyedStart | null) => Promise<StartedCall>,
    send: Send,
    signal: AbortSignal,
  ): Promise<void> {
    const ran: { call?: StartedCall } = {};
    if (!key) ran.call = await begin(null);
    else {
      const tenantId = c.auth.tid;
      const answer = await idempotent<KeyedCall>(deps.store, { tenantId, operation: OPERATION, key, body: req }, async (commit) => {
        ran.call = await begin({
          key,
          idempotencyId: idempotencyRecordId(tenantId, OPERATION, key),
          commit: (recorded) => (write, within) => commit(async (tx) => (await write(tx), recorded), within),
        });
        return { messageId: ran.call.reply.id, resp: ran.call.resp };
      });
      if (!ran.call) return replay(answer, send, signal);
    }
    const { resp, reply, durable } = ran.call;
    // A chat completion nobody reads any more is stopped (and billed for what it produced); a response goes on.
    // The signal may have aborted while the reply was being started (the caller left at once).
    const stop = () => void deps.replies.cancel(reply.id);
    if (!durable && signal.aborted) stop();
    else if (!durable) signal.addEventListener('abort', stop, { once: true });
    await follow(resp, reply, durable, send, signal, req.finalOnly);
  };
}
