/** Chat completions and responses on a model (a catalogue name, the default model or one of its fallbacks). */
import { type AuthedContext, type CallContext, errors, newId, nowIso } from '@svc/kit';
import { authed } from '@svc/contracts';
import { boundPlan, type CallPlan, type LlmMessage } from '@svc/llm';
import type { chatV1 } from '@svc/proto';
import type { MessageDoc, SessionDoc } from '../collections';
import { cataloguePlan, defaultLlm, defaultPlan, holdOf, modelNotFound, replyCall } from '../model-choice';
import type { ReplyLlm } from '../replies';
import { newMessage, pendingReply, startReply } from '../start-reply';
import type { agentCall } from './agent-call';
import { toLlmMessage, toolsOf } from './input';
import { keyedCalls, type KeyedStart, type StartedCall } from './keyed';
import { AGENT_MODEL_PREFIX, type Send } from './records';
import type { CallDeps, CallParts } from './shared';

/** Calls on a model: the catalogue's names and the default model's, and a call started on one. */
export function modelCalls(deps: CallDeps, parts: CallParts, startAgentCall: ReturnType<typeof agentCall>) {
  const { replies, peers } = deps;
  const { sessionFor, responseDoc } = parts;
  const startOnce = keyedCalls(deps, parts);

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
      if (req.kind !== 'completion' && req.kind !== 'response')
        throw errors.validation([{ field: 'kind', message: 'must be completion or response' }]);
      const agentId = req.model.startsWith(AGENT_MODEL_PREFIX) ? req.model.slice(AGENT_MODEL_PREFIX.length) : null;
      const begin = (keyed: KeyedStart | null) =>
        agentId !== null ? startAgentCall(c, req, agentId, keyed) : startModelCall(c, ctx.requestId, req, keyed);
      await startOnce(c, req, ctx.idempotencyKey, begin, send, signal);
    },
  };

  /** Stores a call on a model with its pending reply, and starts generating it. */
  async function startModelCall(
    c: AuthedContext,
    requestId: string,
    req: chatV1.StartCallRequest,
    keyed: KeyedStart | null,
  ): Promise<StartedCall> {
    const { auth, token } = c;
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
          newMessage(auth, { role: t.role as 'user' | 'assistant', content: t.content, sessionId, projectId: session?.projectId ?? '' }),
        );
      }
    }
    const promptChars = prompt.reduce((n, m) => n + m.content.length + (m.toolCalls ? JSON.stringify(m.toolCalls).length : 0), 0);
    const projectId = session?.projectId ?? '';
    const reply = pendingReply(auth, replies.newLease(), {
      sessionId,
      projectId,
      call: replyCall(c, plan, llm.keySource, {
        promptChars,
        projectId,
        agentId: session?.agentId ?? '',
        origin: 'v1',
        requestId,
        endUser: req.endUser,
      }),
      ...(completion || !req.store ? { ephemeral: true } : {}),
      ...(keyed ? { idempotencyId: keyed.idempotencyId } : {}),
    });
    const resp = completion ? null : responseDoc(auth, req, reply, sessionId);
    await startReply(deps, c, {
      job: {
        message: reply,
        history: prompt,
        llm,
        tools,
        durable: !completion,
      },
      hold: holdOf(reply.id, plan, promptChars),
      inputs,
      resp,
      newSession,
      commit: keyed?.commit({ messageId: reply.id, resp }),
    });
    return { resp, reply, durable: !completion };
  }
}
