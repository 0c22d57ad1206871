/** The parts of a model call shared by its kinds: its dependencies, how it is stored, and how it is followed. */
import { AppError, type AuthedContext, errors, nowIso } from '@svc/kit';
import type { LlmMessage, PricingSettings } from '@svc/llm';
import type { chatV1 } from '@svc/proto';
import { messages, responses, sessions, type MessageDoc, type ResponseDoc, type SessionDoc } from '../collections';
import type { LiveReply } from '../live';
import type { Peers } from '../peers';
import type { RunPolls } from '../run-polls';
import type { ReplyStarter } from '../start-reply';
import { chunkOf, endsOf, event, ID_SHAPE, recordOf, type Send, sleep, TERMINAL } from './records';

/** What the calls need: how a reply starts (start-reply.ts), and the rest. */
export interface CallDeps extends ReplyStarter {
  peers: Peers;
  pollMs: number;
  /** One poll per agent run in this process, shared by the replies that report it. */
  runPolls: RunPolls;
  defaultMaxTokens: number;
  pricing: PricingSettings;
  /** RESPONSES_RETENTION_HOURS in ms: how long a response is kept. */
  retentionMs: number;
  sessionOf(id: string, tenantId: string): Promise<SessionDoc>;
  history(session: SessionDoc): Promise<LlmMessage[]>;
}

/**
 * Sends a reply's chunks from `from` on, then `done`, from memory while this process generates it. `durable`: only
 * chunks already stored (what a resumed stream can find again).
 */
export async function relayLive(
  live: LiveReply,
  from: number,
  durable: boolean,
  send: Send,
  signal: AbortSignal,
  done: (m: MessageDoc) => chatV1.CallRecord,
): Promise<void> {
  let i = from;
  while (!signal.aborted) {
    const upTo = durable ? live.durable : live.chunks.length;
    for (; i < upTo && !signal.aborted; i++) await send(event('delta', { index: i, delta: live.chunks[i], servedModel: live.served }));
    if (signal.aborted) return;
    const final = live.final;
    if (final) {
      // The stored reply is the reference: chunks past what was stored while streaming come from it.
      const ends = final.ends ?? live.ends;
      for (; i < ends.length && !signal.aborted; i++) {
        const text = final.ends ? chunkOf(final, ends, i) : live.chunks[i];
        await send(event('delta', { index: i, delta: text, servedModel: final.model ?? live.served }));
      }
      return send(event('done', { call: done(final) }));
    }
    await live.changed(signal);
  }
}

export type CallParts = ReturnType<typeof callParts>;

const NOTHING = Promise.resolve();

/** What the calls on a model, on an agent and the responses' reads share: the stored call and its followers. */
export function callParts(deps: CallDeps) {
  const { store, replies } = deps;
  const responsesCol = store.collection(responses);
  const messagesCol = store.collection(messages);

  async function responseOf(id: string, tenantId: string): Promise<{ resp: ResponseDoc; message: MessageDoc }> {
    const resp = ID_SHAPE.test(id) ? await responsesCol.get(id, { tenantId }) : null;
    const message = resp && Date.parse(resp.expiresAt) > Date.now() ? await messagesCol.get(resp.messageId, { tenantId }) : null;
    if (!resp || !message) throw errors.notFound('response', id);
    return { resp, message };
  }

  /** The session a response continues: a previous response's, a chat reply's, or a named one; null for a new one. */
  async function sessionFor(
    req: chatV1.StartCallRequest,
    tenantId: string,
  ): Promise<{ session: SessionDoc | null; previous: ResponseDoc | null }> {
    if (req.previousResponseId && req.conversationId)
      throw errors.validation([{ field: 'previous_response_id', message: 'cannot be given with conversation' }]);
    if (req.previousResponseId) {
      const id = req.previousResponseId;
      const notFound = () =>
        new AppError('RESOURCE_NOT_FOUND', `Previous response with id '${id}' not found`, {
          resource: 'response',
          id,
          param: 'previous_response_id',
        });
      if (!ID_SHAPE.test(id)) throw notFound();
      if (id.startsWith('msg_')) {
        // A chat reply made through the chat API continues its session too.
        const m = await messagesCol.get(id, { tenantId });
        if (!m || m.role !== 'assistant' || !m.sessionId) throw notFound();
        return { session: await deps.sessionOf(m.sessionId, tenantId), previous: null };
      }
      const resp = await responsesCol.get(id, { tenantId });
      if (!resp || !resp.sessionId || Date.parse(resp.expiresAt) <= Date.now()) throw notFound();
      const session = await deps.sessionOf(resp.sessionId, tenantId).catch(() => {
        throw notFound();
      });
      return { session, previous: resp };
    }
    if (req.conversationId) {
      const s = ID_SHAPE.test(req.conversationId) ? await store.collection(sessions).get(req.conversationId, { tenantId }) : null;
      if (!s)
        throw new AppError('RESOURCE_NOT_FOUND', `Conversation with id '${req.conversationId}' not found`, {
          resource: 'chat_session',
          id: req.conversationId,
          param: 'conversation',
        });
      return { session: s, previous: null };
    }
    return { session: null, previous: null };
  }

  /**
   * Streams a started call to its caller: `started`, then its chunks and `done`. `finalOnly`: the caller reads only
   * `done` (its client does not stream), so the chunks are not sent.
   */
  async function follow(resp: ResponseDoc | null, reply: MessageDoc, durable: boolean, to: Send, signal: AbortSignal, finalOnly = false) {
    const send: Send = finalOnly ? (m) => (m.event.type === 'delta' ? NOTHING : to(m)) : to;
    await send(event('started', { call: recordOf(resp, reply) }));
    const live = replies.get(reply.id);
    if (live) await relayLive(live, 0, durable, send, signal, (m) => recordOf(resp, m));
    else await fromStore(resp, reply, 0, send, signal);
  }

  /**
   * A reply generated elsewhere (or finished): a response relayed live from the process generating it (owner-relay.ts,
   * with the reader's `token`), else polled from the store until it is final.
   */
  async function fromStore(resp: ResponseDoc | null, first: MessageDoc, from: number, send: Send, signal: AbortSignal, token?: string) {
    let doc: MessageDoc | null = first;
    let i = from;
    let relayed = false;
    while (doc && !signal.aborted) {
      const ends = endsOf(doc);
      for (; i < ends.length && !signal.aborted; i++)
        await send(event('delta', { index: i, delta: chunkOf(doc, ends, i), servedModel: doc.model ?? '' }));
      if (TERMINAL.has(doc.status)) return send(event('done', { call: recordOf(resp, doc) }));
      const live = replies.get(doc.id);
      if (live) return relayLive(live, i, true, send, signal, (m) => recordOf(resp, m));
      // Once: a relay that stopped short leaves the rest to the store.
      if (resp && !relayed && deps.owners?.owns(doc)) {
        relayed = true;
        const at = await deps.owners.relayResponse(doc, resp.id, i, token, send, signal);
        if (at.final) return;
        i = at.chunk;
      }
      await sleep(deps.pollMs, signal);
      doc = await messagesCol.get(doc.id);
    }
  }

  function responseDoc(
    auth: AuthedContext['auth'],
    req: chatV1.StartCallRequest,
    reply: MessageDoc,
    sessionId: string,
    agent: { agentId?: string; runId?: string } = {},
  ): ResponseDoc {
    const createdAt = nowIso();
    return {
      id: `resp_${reply.id.slice(4)}`,
      tenantId: auth.tid,
      messageId: reply.id,
      sessionId,
      model: req.model,
      background: req.background,
      store: req.store,
      previousResponseId: req.previousResponseId,
      instructions: req.instructions,
      metadata: req.metadataJson,
      echo: req.echoJson,
      ...agent,
      createdAt,
      expiresAt: new Date(Date.parse(createdAt) + deps.retentionMs).toISOString(),
    };
  }

  return { responseOf, sessionFor, follow, fromStore, responseDoc, messagesCol };
}
