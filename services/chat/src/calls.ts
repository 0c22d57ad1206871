/**
 * The model calls of the OpenAI-compatible API (CONTRACT.md 9): chat completions and responses, made as chat replies
 * so that they share the replies' reservations, billing, leases, crash sweep and per-key limits. A stored response
 * is a reply in a chat session (its input the user messages before it), so it shows in the session's transcript and
 * a session can be continued from either side. A response's stream is numbered by chunk, and each chunk is stored
 * before any reader sends it: a stream resumed after any event, from any process, continues exactly there.
 */
import {
  AppError,
  type AuthedContext,
  authed,
  type CallContext,
  errors,
  type KeySlots,
  newId,
  nowIso,
  type Store,
  type StoreSession,
  type TenantCap,
} from '@svc/kit';
import { boundPlan, type CallPlan, type LlmMessage, type LlmTool, type LlmToolCall, type PricingSettings } from '@svc/llm';
import type { chatV1 } from '@svc/proto';
import {
  messages,
  nextSeq,
  responses,
  sessions,
  type MessageDoc,
  type ResponseDoc,
  type SessionDoc,
  type StoredApproval,
} from './collections';
import type { CreditCheck } from './credits';
import type { LiveReply } from './live';
import { cataloguePlan, defaultLlm, defaultPlan, holdOf, modelNotFound, replyCall } from './model-choice';
import type { Peers } from './peers';
import { type ReplyLlm, type ReplySourceEvent, ReplyFailure, type Replies } from './replies';

export const AGENT_MODEL_PREFIX = 'agent:';
const ID_SHAPE = /^[a-z]{2,8}_[0-9A-Za-z]{1,64}$/;

export interface CallDeps {
  store: Store;
  replies: Replies;
  peers: Peers;
  credits: CreditCheck;
  pollMs: number;
  defaultMaxTokens: number;
  pricing: PricingSettings;
  /** RESPONSES_RETENTION_HOURS in ms: how long a response is kept. */
  retentionMs: number;
  cap: TenantCap;
  keySlots: KeySlots<MessageDoc>;
  sessionOf(id: string, tenantId: string): Promise<SessionDoc>;
  history(session: SessionDoc): Promise<LlmMessage[]>;
  assertReplySlot(tenantId: string): Promise<void>;
}

type Send = (m: { event: chatV1.CallEvent }) => Promise<void>;

const TERMINAL = new Set(['completed', 'failed']);
const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    }
  });

/** The status of a call as OpenAI names them. */
export function statusOf(resp: Pick<ResponseDoc, 'background'> | null, m: MessageDoc): string {
  switch (m.status) {
    case 'pending':
      return resp?.background ? 'queued' : 'in_progress';
    case 'streaming':
      return 'in_progress';
    case 'completed':
      return m.finishReason === 'length' ? 'incomplete' : 'completed';
    default:
      return m.errorCode === 'REPLY_CANCELLED' ? 'cancelled' : 'failed';
  }
}

function endsOf(m: MessageDoc): number[] {
  return m.ends ?? (m.content ? [m.content.length] : []);
}

function chunkOf(m: MessageDoc, ends: number[], i: number): string {
  return m.content.slice(i === 0 ? 0 : ends[i - 1], ends[i]);
}

export function recordOf(resp: ResponseDoc | null, m: MessageDoc): chatV1.CallRecord {
  const approval = m.approval;
  return {
    id: resp?.id ?? m.id,
    messageId: m.id,
    sessionId: resp ? resp.sessionId : '',
    model: resp?.model ?? m.call?.model ?? '',
    servedModel: m.model || m.call?.model || resp?.model || '',
    createdAt: resp?.createdAt ?? m.createdAt,
    completedAt: m.completedAt ?? '',
    status: statusOf(resp, m),
    background: resp?.background ?? false,
    store: resp?.store ?? false,
    previousResponseId: resp?.previousResponseId ?? '',
    metadataJson: resp?.metadata ?? '',
    echoJson: resp?.echo ?? '',
    instructions: resp?.instructions ?? '',
    content: m.content,
    chunks: endsOf(m).length,
    toolCalls: (m.toolCalls ?? []).map((c) => ({ id: c.id, name: c.name, argumentsJson: c.arguments })),
    usage:
      m.inputTokens !== null || m.outputTokens !== null
        ? { inputTokens: m.inputTokens ?? 0, outputTokens: m.outputTokens ?? 0 }
        : undefined,
    finishReason: m.finishReason ?? '',
    errorCode: m.errorCode ?? '',
    errorMessage: m.errorMessage ?? '',
    approval: approval
      ? {
          runId: approval.runId,
          agentId: approval.agentId,
          toolName: approval.toolName,
          toolCallId: approval.toolCallId,
          argumentsJson: approval.arguments,
        }
      : undefined,
    agentRunId: resp?.runId ?? '',
    expiresAt: resp?.expiresAt ?? '',
  };
}

const event = (type: string, fields: Partial<chatV1.CallEvent> = {}): { event: chatV1.CallEvent } => ({
  event: { type, call: undefined, index: 0, delta: '', servedModel: '', ...fields },
});

function parseJsonObject(field: string, text: string): Record<string, unknown> {
  try {
    const v = JSON.parse(text) as unknown;
    if (v && typeof v === 'object' && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    // reported below
  }
  throw errors.validation([{ field, message: 'must be a JSON object' }]);
}

function toLlmMessage(m: chatV1.InputMessage, i: number): LlmMessage {
  const role = m.role as LlmMessage['role'];
  if (!['system', 'user', 'assistant', 'tool'].includes(role))
    throw errors.validation([{ field: `messages[${i}].role`, message: 'must be system, developer, user, assistant or tool' }]);
  if (role === 'tool' && !m.toolCallId) throw errors.validation([{ field: `messages[${i}].tool_call_id`, message: 'is required' }]);
  const toolCalls: LlmToolCall[] = m.toolCalls.map((c, j) => ({
    id: c.id,
    name: c.name,
    arguments: parseJsonObject(`messages[${i}].tool_calls[${j}].function.arguments`, c.argumentsJson || '{}'),
  }));
  return {
    role,
    content: m.content,
    ...(toolCalls.length ? { toolCalls } : {}),
    ...(role === 'tool' ? { toolCallId: m.toolCallId } : {}),
  };
}

function toolsOf(req: chatV1.StartCallRequest): LlmTool[] {
  return req.tools.map((t, i) => ({
    name: t.name,
    description: t.description,
    parameters: t.parametersJson
      ? parseJsonObject(`tools[${i}].function.parameters`, t.parametersJson)
      : { type: 'object', properties: {} },
  }));
}

/**
 * Sends a reply's chunks from `from` on, then `done`, from memory while this process generates it. `durable`: only
 * chunks already stored (what a resumed stream can find again).
 */
async function relayLive(
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

export function callHandlers(deps: CallDeps) {
  const { store, replies, peers } = deps;
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
   * Stores what a new call needs in one transaction (a new session under its cap, the input turns, the reply, the
   * response), taking the key's concurrency place.
   */
  async function insert(
    auth: AuthedContext['auth'],
    newSession: SessionDoc | null,
    docs: { inputs: MessageDoc[]; reply: MessageDoc; resp: ResponseDoc | null },
  ): Promise<void> {
    const write = async (tx: StoreSession) => {
      await deps.keySlots.take(tx, auth);
      const col = tx.collection(messages);
      for (const m of docs.inputs) await col.insert(m);
      await col.insert(docs.reply);
      if (docs.resp) await tx.collection(responses).insert(docs.resp);
    };
    if (newSession)
      await deps.cap.transaction(auth.tid, async (tx, places) => {
        await places.take();
        await tx.collection(sessions).insert(newSession);
        await write(tx);
      });
    else await store.transaction(write);
  }

  function messageDoc(
    auth: AuthedContext['auth'],
    fields: Partial<MessageDoc> & Pick<MessageDoc, 'role' | 'content' | 'sessionId'>,
  ): MessageDoc {
    const now = nowIso();
    return {
      id: newId('msg'),
      tenantId: auth.tid,
      projectId: '',
      status: 'completed',
      seq: nextSeq(),
      errorCode: null,
      errorMessage: null,
      inputTokens: null,
      outputTokens: null,
      leaseBeat: null,
      leaseMs: null,
      createdAt: now,
      completedAt: now,
      ...fields,
    };
  }

  /** Streams a started call to its caller: `started`, then its chunks and `done`. */
  async function follow(resp: ResponseDoc | null, reply: MessageDoc, durable: boolean, send: Send, signal: AbortSignal) {
    await send(event('started', { call: recordOf(resp, reply) }));
    const live = replies.get(reply.id);
    if (live) await relayLive(live, 0, durable, send, signal, (m) => recordOf(resp, m));
    else await fromStore(resp, reply, 0, send, signal);
  }

  /** A reply generated elsewhere (or finished): polled from the store until it is final. */
  async function fromStore(resp: ResponseDoc | null, first: MessageDoc, from: number, send: Send, signal: AbortSignal) {
    let doc: MessageDoc | null = first;
    let i = from;
    while (doc && !signal.aborted) {
      const ends = endsOf(doc);
      for (; i < ends.length && !signal.aborted; i++)
        await send(event('delta', { index: i, delta: chunkOf(doc, ends, i), servedModel: doc.model ?? '' }));
      if (TERMINAL.has(doc.status)) return send(event('done', { call: recordOf(resp, doc) }));
      const live = replies.get(doc.id);
      if (live) return relayLive(live, i, true, send, signal, (m) => recordOf(resp, m));
      await sleep(deps.pollMs, signal);
      doc = await messagesCol.get(doc.id);
    }
  }

  /** A response on an agent: its run, started (or the previous response's, followed), reported when it stops. */
  function runSource(agentId: string, runId: string, token: string) {
    return async function* watch(signal: AbortSignal): AsyncIterable<ReplySourceEvent> {
      while (!signal.aborted) {
        const run = await peers.getRun(agentId, runId, token);
        if (run.status === 'completed') {
          if (run.output) yield { type: 'text', delta: run.output };
          if (run.usage) yield { type: 'usage', inputTokens: run.usage.inputTokens, outputTokens: run.usage.outputTokens };
          yield { type: 'finish', reason: 'stop' };
          return;
        }
        if (run.status === 'requires_approval') {
          const step = run.steps.find((s) => s.status === 'requires_approval');
          const approval: StoredApproval = {
            runId: run.id,
            agentId,
            toolName: step?.toolName ?? '',
            toolCallId: step?.toolCallId ?? '',
            arguments: step?.argumentsJson || '{}',
          };
          yield { type: 'approval', approval };
          yield { type: 'finish', reason: 'stop' };
          return;
        }
        if (run.status === 'failed') throw new ReplyFailure('AGENT_RUN_FAILED', run.error || 'The agent run failed');
        if (run.status === 'cancelled') throw new ReplyFailure('AGENT_RUN_CANCELLED', 'The agent run was cancelled');
        await sleep(deps.pollMs, signal);
      }
      // Stopped before the run ended (a cancel, or this process stopping): never a completed reply.
      throw new ReplyFailure('REPLY_INTERRUPTED', 'The chat service stopped following the agent run before it ended');
    };
  }

  async function startAgentCall(
    c: AuthedContext,
    req: chatV1.StartCallRequest,
    agentId: string,
    send: Send,
    signal: AbortSignal,
  ): Promise<void> {
    const { auth, token } = c;
    if (req.kind !== 'response')
      throw errors.badRequest('agent_model_needs_responses', 'Agents answer through POST /v1/responses', { param: 'model' });
    if (!ID_SHAPE.test(agentId)) throw modelNotFound(req.model);
    await peers.agent(agentId, token).catch((err: unknown) => {
      if ((err as { code?: string }).code === 'RESOURCE_NOT_FOUND') throw modelNotFound(req.model);
      throw err;
    });
    const { session, previous } = await sessionFor(req, auth.tid);
    const metadata = req.metadataJson ? (JSON.parse(req.metadataJson) as Record<string, string>) : {};
    const goal = req.input
      .filter((m) => m.role === 'user')
      .map((m) => m.content)
      .join('\n\n')
      .trim();
    // A previous response's run that has not ended (it waited for approval): this response follows it.
    let runId = '';
    if (previous?.runId && previous.agentId === agentId) {
      const run = await peers.getRun(agentId, previous.runId, token);
      if (!['completed', 'failed', 'cancelled'].includes(run.status)) {
        runId = run.id;
        if (req.approvalRequestId) {
          if (req.approvalRequestId !== run.id || run.status !== 'requires_approval')
            throw errors.validation([{ field: 'input', message: 'the approval request is not waiting for a decision' }]);
          await peers.decideRun(agentId, run.id, req.approve, req.approvalReason, token);
        }
      }
    }
    if (!runId && req.approvalRequestId)
      throw errors.validation([{ field: 'input', message: 'the approval request is not waiting for a decision' }]);
    const projectId = metadata.project_id || session?.projectId || '';
    if (!runId) {
      if (!goal) throw errors.validation([{ field: 'input', message: 'must hold a user message (the goal of the agent run)' }]);
      if (!projectId)
        throw errors.badRequest('project_required', "An agent's run works in a project: give metadata.project_id", {
          param: 'metadata.project_id',
        });
      runId = (await peers.executeAgent({ agentId, goal, projectId }, token)).id;
    }
    const now = nowIso();
    const newSession: SessionDoc | null =
      session || !req.store
        ? null
        : { id: newId('chs'), tenantId: auth.tid, projectId, agentId, title: goal.slice(0, 200), createdAt: now };
    const sessionId = req.store ? (session ?? newSession)!.id : '';
    const inputs = req.store && goal ? [messageDoc(auth, { role: 'user', content: goal, sessionId, projectId })] : [];
    const reply = messageDoc(auth, {
      role: 'assistant',
      content: '',
      sessionId,
      projectId,
      status: 'pending',
      completedAt: null,
      ...replies.newLease(),
      ...(auth.typ === 'api_key' ? { credentialId: auth.sid } : {}),
      ...(req.store ? {} : { ephemeral: true }),
    });
    const resp = responseDoc(auth, req, reply, sessionId, { agentId, runId });
    await deps.keySlots.prepare(auth);
    await insert(auth, newSession, { inputs, reply, resp });
    replies.start({
      tenantId: auth.tid,
      message: reply,
      history: [],
      llm: { settings: { provider: 'openai-compatible' }, keySource: 'tenant' },
      durable: true,
      source: runSource(agentId, runId, token),
    });
    await follow(resp, reply, true, send, signal);
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

  return {
    /** Each catalogue name once (of its enabled entries), then the default model and its fallbacks. */
    async listModels(_req: chatV1.ListModelsRequest, ctx: CallContext): Promise<chatV1.ListModelsResponse> {
      const { auth, token } = authed(ctx, 'llm:use');
      const [llm, entries] = await Promise.all([defaultLlm(peers, token, auth.tid), peers.catalogue(token, auth.tid, '')]);
      const names = [...entries.map((e) => e.name).sort(), llm?.settings.model, ...(llm?.fallbacks ?? []).map((f) => f.model)];
      return { models: [...new Set(names.filter((m): m is string => Boolean(m)))] };
    },

    async startCall(req: chatV1.StartCallRequest, ctx: CallContext, send: Send, signal: AbortSignal): Promise<void> {
      const c = authed(ctx, 'llm:use');
      const { auth, token } = c;
      if (req.kind !== 'completion' && req.kind !== 'response')
        throw errors.validation([{ field: 'kind', message: 'must be completion or response' }]);
      if (req.model.startsWith(AGENT_MODEL_PREFIX)) return startAgentCall(c, req, req.model.slice(AGENT_MODEL_PREFIX.length), send, signal);
      const completion = req.kind === 'completion';
      if (completion && req.input.length === 0) throw errors.validation([{ field: 'messages', message: 'must not be empty' }]);
      const inputTurns = req.input.map(toLlmMessage);
      const tools = toolsOf(req);

      const [resolved, entries, found] = await Promise.all([
        defaultLlm(peers, token, auth.tid),
        req.model ? peers.catalogue(token, auth.tid, req.model) : [],
        completion ? null : sessionFor(req, auth.tid),
      ]);
      // A catalogue name: its entries by weight, then the default model's fallbacks. Else the model must be one the
      // tenant configured (GET /v1/models); a tenant that named none lets the caller name it. Naming a fallback
      // starts the chain there (with the main model's temperature and output bound).
      let llm: ReplyLlm;
      let named: CallPlan;
      if (entries.length) {
        llm = resolved ?? { settings: { provider: 'openai' }, keySource: 'tenant' };
        named = cataloguePlan(req.model, entries, resolved, deps.pricing);
      } else {
        if (!resolved) await peers.llm(token, auth.tid); // llm_not_configured
        llm = { ...resolved!, settings: { ...resolved!.settings } };
        if (llm.settings.model && req.model !== llm.settings.model) {
          const at = (llm.fallbacks ?? []).findIndex((f) => f.model === req.model);
          if (at < 0) throw modelNotFound(req.model);
          const { temperature, maxTokens } = llm.settings;
          llm.settings = { ...llm.fallbacks![at], temperature, maxTokens };
          llm.fallbacks = llm.fallbacks!.slice(at + 1);
        }
        llm.settings.model ||= req.model;
        named = defaultPlan(llm, deps.pricing, req.model);
      }
      const plan = boundPlan(named, {
        maxTokens: req.maxOutputTokens ?? llm.settings.maxTokens ?? deps.defaultMaxTokens,
        temperature: req.temperature ?? llm.settings.temperature,
        callerBound: req.maxOutputTokens !== undefined,
      });
      llm = { ...llm, plan };

      let prompt: LlmMessage[];
      let inputs: MessageDoc[] = [];
      let newSession: SessionDoc | null = null;
      let sessionId = '';
      const session = found?.session ?? null;
      if (completion) prompt = inputTurns;
      else {
        if (inputTurns.some((m) => m.role === 'tool' || m.toolCalls))
          throw errors.badRequest('unsupported_input', 'Function call items in input are answered on POST /v1/chat/completions', {
            param: 'input',
          });
        const system = [req.instructions, ...inputTurns.filter((m) => m.role === 'system').map((m) => m.content)].filter(Boolean);
        const turns = inputTurns.filter((m) => m.role !== 'system');
        if (turns.length === 0) throw errors.validation([{ field: 'input', message: 'must hold at least one message' }]);
        const agent = session?.agentId ? await peers.agent(session.agentId, token) : null;
        if (!system.length && agent?.systemPrompt) system.push(agent.systemPrompt);
        const before = session ? await deps.history(session) : [];
        prompt = [...system.map((content): LlmMessage => ({ role: 'system', content: content! })), ...before, ...turns];
        if (req.store) {
          const firstText = turns.find((t) => t.role === 'user')?.content ?? '';
          newSession = session
            ? null
            : {
                id: newId('chs'),
                tenantId: auth.tid,
                projectId: '',
                agentId: '',
                title: firstText.slice(0, 200).trim(),
                createdAt: nowIso(),
              };
          sessionId = (session ?? newSession)!.id;
          inputs = turns.map((t) =>
            messageDoc(auth, { role: t.role as 'user' | 'assistant', content: t.content, sessionId, projectId: session?.projectId ?? '' }),
          );
        }
      }
      const promptChars = prompt.reduce((n, m) => n + m.content.length + (m.toolCalls ? JSON.stringify(m.toolCalls).length : 0), 0);
      const projectId = session?.projectId ?? '';
      const reply = messageDoc(auth, {
        role: 'assistant',
        content: '',
        sessionId,
        projectId,
        status: 'pending',
        completedAt: null,
        ...replies.newLease(),
        call: replyCall(c, plan, llm.keySource, {
          promptChars,
          projectId,
          agentId: session?.agentId ?? '',
          origin: 'v1',
          requestId: ctx.requestId,
          endUser: req.endUser,
        }),
        ...(auth.typ === 'api_key' ? { credentialId: auth.sid } : {}),
        ...(completion || !req.store ? { ephemeral: true } : {}),
      });
      const resp = completion ? null : responseDoc(auth, req, reply, sessionId);
      await deps.keySlots.prepare(auth);
      await deps.credits.reserve(c, holdOf(reply.id, plan, promptChars));
      try {
        await deps.assertReplySlot(auth.tid);
        await insert(auth, newSession, { inputs, reply, resp });
      } catch (err) {
        await deps.credits.release(c, reply.id).catch(() => undefined);
        throw err;
      }
      replies.start({
        tenantId: auth.tid,
        credentialId: auth.sid,
        credentialType: auth.typ,
        message: reply,
        history: prompt,
        llm,
        tools,
        durable: !completion,
      });
      // A chat completion nobody reads any more is stopped (and billed for what it produced); a response goes on.
      if (completion) signal.addEventListener('abort', () => void replies.cancel(reply.id), { once: true });
      await follow(resp, reply, !completion, send, signal);
    },

    async streamResponse(req: chatV1.StreamResponseRequest, ctx: CallContext, send: Send, signal: AbortSignal): Promise<void> {
      const { auth } = authed(ctx, 'llm:use');
      const { resp, message } = await responseOf(req.id, auth.tid);
      await send(event('started', { call: recordOf(resp, message) }));
      const from = Math.max(0, req.fromChunk);
      const live = replies.get(message.id);
      if (live) await relayLive(live, from, true, send, signal, (m) => recordOf(resp, m));
      else await fromStore(resp, message, from, send, signal);
    },

    async getResponse(req: chatV1.GetResponseRequest, ctx: CallContext): Promise<chatV1.GetResponseResponse> {
      const { auth } = authed(ctx, 'llm:use');
      const { resp, message } = await responseOf(req.id, auth.tid);
      return { call: recordOf(resp, message) };
    },

    async cancelResponse(req: chatV1.CancelResponseRequest, ctx: CallContext): Promise<chatV1.CancelResponseResponse> {
      const { auth, token } = authed(ctx, 'llm:use');
      const { resp, message } = await responseOf(req.id, auth.tid);
      if (TERMINAL.has(message.status)) return { call: recordOf(resp, message) };
      // A response on an agent stops its run too, once the response is cancelled (a run that ended meanwhile is
      // left as it is).
      const cancelRun = async () => {
        if (resp.agentId && resp.runId)
          await peers.cancelRun(resp.agentId, resp.runId, token).catch((err: unknown) => {
            if ((err as { code?: string }).code !== 'CONFLICT') throw err;
          });
      };
      if (await replies.cancel(message.id)) {
        await cancelRun();
        const doc = (await messagesCol.get(message.id)) ?? { ...message, status: 'failed' as const, errorCode: 'REPLY_CANCELLED' };
        return { call: recordOf(resp, doc) };
      }
      // Generated by another process (or by none: it died): failed here with a compare-and-set on its lease, and
      // billed for what was stored, once (the generator's own bill, if it lives, is the same call's and ignored).
      for (let attempt = 0; attempt < 20; attempt++) {
        const doc = await messagesCol.get(message.id);
        if (!doc) throw errors.notFound('response', req.id);
        if (TERMINAL.has(doc.status)) return { call: recordOf(resp, doc) };
        const updated = await replies.failRemote(doc, 'REPLY_CANCELLED', 'The reply was cancelled');
        if (updated) {
          await cancelRun();
          return { call: recordOf(resp, updated) };
        }
        await new Promise((r) => setTimeout(r, 20));
      }
      throw errors.conflict('The response is changing too fast to cancel; try again');
    },
  };
}
