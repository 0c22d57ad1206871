import { type CallContext, errors, idempotent, newId, nowIso, type Store } from '@svc/kit';
import { authed } from '@svc/contracts';
import { boundPlan, type LlmMessage, type PricingSettings } from '@svc/llm';
import type { chatV1 } from '@svc/proto';
import { messages, sessionCap, sessions, type SessionDoc } from '../collections';
import { callHandlers } from '../calls';
import type { CreditCheck } from '../credits';
import { keyReplySlots } from '../key-concurrency';
import { holdOf, replyCall, restPlan } from '../model-choice';
import type { Peers } from '../peers';
import type { Replies } from '../replies';
import { type ReplyLimits, ReplySlots } from '../reply-slots';
import { RunPolls } from '../run-polls';
import { newMessage, pendingReply, type ReplyStarter, startReply } from '../start-reply';
import type { OwnerRelay } from '../owner-relay';
import { streamReply } from '../stream';
import { toMessage, toSession } from '../views';

export const LIMITS = { title: 200, content: 32_000, id: 100, model: 100 } as const;
/** The most recent messages of a session sent to the model with a new one. */
export const HISTORY_LIMIT = 100;

/** Awaits all; throws the first failure in the given order (not the first to happen), so refusals are stable. */
async function inOrder<T extends readonly unknown[]>(promises: { [K in keyof T]: Promise<T[K]> }): Promise<T> {
  const settled = await Promise.allSettled(promises);
  for (const r of settled) if (r.status === 'rejected') throw r.reason;
  return settled.map((r) => (r as PromiseFulfilledResult<unknown>).value) as unknown as T;
}

function checkLength(field: string, value: string, max: number, min = 0): void {
  if (value.length < min || value.length > max) throw errors.validation([{ field, message: `must be ${min} to ${max} characters` }]);
}

export interface ChatDeps {
  store: Store;
  replies: Replies;
  peers: Peers;
  credits: CreditCheck;
  pollMs: number;
  /** Replies of one tenant generating at once (CHAT_TENANT_CONCURRENCY). */
  tenantConcurrency: number;
  /** Followers of agent runs at once, per tenant and per API key (CHAT_RUN_FOLLOWERS_PER_TENANT, _PER_KEY). */
  followerLimits: Omit<ReplyLimits, 'replies'>;
  /** Sessions a tenant may keep (CHAT_SESSIONS_PER_TENANT); deleting one frees its place. */
  maxSessionsPerTenant: number;
  /** LLM_MAX_TOKENS: a reply's output bound when the tenant set none (its reservation counts it). */
  defaultMaxTokens: number;
  /** RESPONSES_RETENTION_HOURS in ms: how long a response of the OpenAI-compatible API is kept. */
  responsesRetentionMs: number;
  /** CREDITS_PER_USD and CREDITS_PER_1K_TOKENS: the price of a model without a catalogue price. */
  pricing: PricingSettings;
  /** With CHAT_PEER_ADDR: replies other chat processes generate are relayed from them (owner-relay.ts). */
  owners?: OwnerRelay;
}

export function chatHandlers(deps: ChatDeps) {
  const { store, replies, peers, credits } = deps;
  const keySlots = keyReplySlots(store);
  const sessionsCol = store.collection(sessions);
  const messagesCol = store.collection(messages);
  const cap = sessionCap(store, deps.maxSessionsPerTenant);
  const replySlots = new ReplySlots(store, { replies: deps.tenantConcurrency, ...deps.followerLimits });
  const starter: ReplyStarter = { store, replies, credits, cap, keySlots, replySlots, owners: deps.owners };

  async function sessionOf(id: string, tenantId: string): Promise<SessionDoc> {
    const s = id ? await sessionsCol.get(id, { tenantId }) : null;
    if (!s) throw errors.notFound('chat_session', id);
    return s;
  }

  /** The session's recent transcript for the model: finished turns only, oldest first. */
  async function history(session: SessionDoc): Promise<LlmMessage[]> {
    const page = await messagesCol.find({ sessionId: session.id }, { order: 'desc', limit: HISTORY_LIMIT });
    const turns = page.items
      .reverse()
      .filter((m) => m.role === 'user' || (m.status === 'completed' && m.content !== ''))
      .map((m): LlmMessage => ({ role: m.role, content: m.content }));
    return turns;
  }

  return {
    ...callHandlers({
      store,
      replies,
      peers,
      credits,
      pollMs: deps.pollMs,
      defaultMaxTokens: deps.defaultMaxTokens,
      pricing: deps.pricing,
      retentionMs: deps.responsesRetentionMs,
      cap,
      keySlots,
      replySlots,
      owners: deps.owners,
      runPolls: new RunPolls((agentId, runId, token) => peers.getRun(agentId, runId, token), deps.pollMs),
      sessionOf,
      history,
    }),

    async createSession(req: chatV1.CreateSessionRequest, ctx: CallContext): Promise<chatV1.CreateSessionResponse> {
      const { auth, token } = authed(ctx, 'agents:write');
      checkLength('title', req.title, LIMITS.title);
      checkLength('projectId', req.projectId, LIMITS.id);
      checkLength('agentId', req.agentId, LIMITS.id);
      checkLength('model', req.model, LIMITS.model);
      if (req.projectId) await peers.checkProject(req.projectId, token);
      if (req.agentId) await peers.agent(req.agentId, token);
      if (req.model) await restPlan(peers, token, auth.tid, deps.pricing, req.model, '');
      const doc: SessionDoc = {
        id: newId('chs'),
        tenantId: auth.tid,
        projectId: req.projectId,
        agentId: req.agentId,
        title: req.title.trim(),
        ...(req.model ? { model: req.model } : {}),
        createdAt: nowIso(),
      };
      await cap.transaction(auth.tid, async (tx, places) => {
        await places.take();
        await tx.collection(sessions).insert(doc);
      });
      return { session: toSession(doc) };
    },

    async listSessions(req: chatV1.ListSessionsRequest, ctx: CallContext): Promise<chatV1.ListSessionsResponse> {
      const { auth } = authed(ctx, 'agents:read');
      const page = await sessionsCol.find({ tenantId: auth.tid }, { limit: req.limit || 20, cursor: req.cursor || null });
      return { sessions: page.items.map(toSession), nextCursor: page.nextCursor ?? '' };
    },

    async getSession(req: chatV1.GetSessionRequest, ctx: CallContext): Promise<chatV1.GetSessionResponse> {
      const { auth } = authed(ctx, 'agents:read');
      return { session: toSession(await sessionOf(req.id, auth.tid)) };
    },

    /**
     * The session first, so no new message can be posted to it, then its messages. A reply still generating would be
     * billed for a transcript its owner no longer has: refused with 409 until it ends (a cancel is seconds away).
     */
    async deleteSession(req: chatV1.DeleteSessionRequest, ctx: CallContext): Promise<chatV1.DeleteSessionResponse> {
      const { auth } = authed(ctx, 'agents:write');
      const session = await sessionOf(req.id, auth.tid);
      for (const status of ['pending', 'streaming'] as const)
        if (await messagesCol.findOne({ sessionId: session.id, status }))
          throw errors.conflict('A reply in this session is still being generated; delete the session when it ends', {
            reason: 'reply_in_progress',
          });
      await cap.transaction(auth.tid, async (tx, places) => {
        if (await tx.collection(sessions).delete(session.id, { tenantId: auth.tid })) await places.free();
      });
      await messagesCol.deleteMany({ sessionId: session.id });
      return { id: session.id };
    },

    /** Oldest first: a transcript reads top to bottom, and the next page continues the conversation. */
    async listMessages(req: chatV1.ListMessagesRequest, ctx: CallContext): Promise<chatV1.ListMessagesResponse> {
      const { auth } = authed(ctx, 'agents:read');
      const session = await sessionOf(req.sessionId, auth.tid);
      const page = await messagesCol.find({ sessionId: session.id }, { order: 'asc', limit: req.limit || 20, cursor: req.cursor || null });
      return { messages: page.items.map(toMessage), nextCursor: page.nextCursor ?? '' };
    },

    async postMessage(req: chatV1.PostMessageRequest, ctx: CallContext): Promise<chatV1.PostMessageResponse> {
      const authedCtx = authed(ctx, 'agents:write');
      const { auth, token } = authedCtx;
      if (req.content.trim() === '') throw errors.validation([{ field: 'content', message: 'must not be empty' }]);
      checkLength('content', req.content, LIMITS.content, 1);
      checkLength('projectId', req.projectId, LIMITS.id);
      checkLength('model', req.model, LIMITS.model);
      // Once per Idempotency-Key: the message, its pending reply and the answer commit together; a replay starts
      // nothing (a reply committed before a crash is taken up by the replies' lease).
      const scope = { tenantId: auth.tid, operation: 'postMessage', key: ctx.idempotencyKey, body: req };
      return idempotent<chatV1.PostMessageResponse>(store, scope, async (commit) => {
        // Everything that can refuse the message runs before anything is stored: the lookups at once (they are on the
        // path to the first token), their refusals reported in a fixed order (session, project, LLM, agent).
        const sessionP = sessionOf(req.sessionId, auth.tid);
        const projectP = sessionP.then((s) =>
          req.projectId && req.projectId !== s.projectId ? peers.checkProject(req.projectId, token) : undefined,
        );
        const agentP = sessionP.then((s) => (s.agentId ? peers.agent(s.agentId, token) : null));
        // The message's model, else the session's, else the agent's (a catalogue name or, as before the catalogue, a
        // model of the default provider), else the default model.
        const planP = Promise.all([sessionP, agentP]).then(([s, a]) =>
          restPlan(peers, token, auth.tid, deps.pricing, req.model || s.model || '', a?.model ?? ''),
        );
        const turnsP = sessionP.then((s) => history(s));
        const [session, , chosen, agent, turns] = await inOrder([sessionP, projectP, planP, agentP, turnsP] as const);
        // The reply's output is bounded, so its reservation is its most possible cost.
        const plan = boundPlan(chosen.plan, {
          maxTokens: chosen.llm?.settings.maxTokens ?? deps.defaultMaxTokens,
          temperature: agent?.temperature ?? chosen.llm?.settings.temperature,
        });
        const system: LlmMessage[] = agent?.systemPrompt ? [{ role: 'system', content: agent.systemPrompt }] : [];
        const prompt: LlmMessage[] = [...system, ...turns, { role: 'user', content: req.content }];
        const promptChars = prompt.reduce((n, m) => n + (typeof m.content === 'string' ? m.content.length : 0), 0);

        const now = nowIso();
        const projectId = req.projectId || session.projectId;
        const user = newMessage(auth, { role: 'user', content: req.content, sessionId: session.id, projectId }, now);
        const reply = pendingReply(
          auth,
          replies.newLease(),
          {
            sessionId: session.id,
            projectId,
            call: replyCall(authedCtx, plan, chosen.llm?.keySource ?? 'tenant', {
              promptChars,
              projectId,
              agentId: session.agentId,
              origin: 'chat',
              requestId: ctx.requestId,
              endUser: req.endUser,
            }),
          },
          now,
        );
        const answer = { message: toMessage(user), responseMessageId: reply.id };
        await startReply(starter, authedCtx, {
          job: {
            message: reply,
            history: prompt,
            llm: { ...(chosen.llm ?? { settings: plan.primary[0].settings, keySource: 'tenant' }), plan },
            // Its stream resumes by Last-Event-ID, after a crash too: readers send only stored chunks (group commit).
            durable: true,
          },
          hold: holdOf(reply.id, plan, promptChars),
          inputs: [user],
          // The answer is recorded under the Idempotency-Key in the transaction that stores the message and its reply.
          commit: (write, within) => commit(async (tx) => (await write(tx), answer), within),
        });
        return answer;
      });
    },

    streamReply: (
      req: chatV1.StreamReplyRequest,
      ctx: CallContext,
      send: (m: chatV1.StreamReplyResponse) => Promise<void>,
      signal: AbortSignal,
    ) => {
      const { auth, token } = authed(ctx, 'agents:read');
      return streamReply({ ...deps, sessionOf: (id) => sessionOf(id, auth.tid), token }, req, send, signal);
    },
  };
}
