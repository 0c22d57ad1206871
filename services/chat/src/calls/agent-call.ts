/** Responses on an agent (`agent:<id>`): a reply whose source is the agent's run instead of a model. */
import { type AuthedContext, errors, newId, nowIso } from '@svc/kit';
import type { chatV1 } from '@svc/proto';
import type { SessionDoc, StoredApproval } from '../collections';
import { holdOf, modelNotFound, restPlan } from '../model-choice';
import { type ReplySourceEvent, ReplyFailure } from '../replies';
import { newMessage, pendingReply, startReply } from '../start-reply';
import type { KeyedStart, StartedCall } from './keyed';
import { ID_SHAPE } from './records';
import type { CallDeps, CallParts } from './shared';

/**
 * A call on `agent:<id>` (a response or a chat completion): the agent's run (started, or a previous response's
 * followed), reported when it stops.
 */
export function agentCall(deps: CallDeps, parts: CallParts) {
  const { replies, peers } = deps;
  const { sessionFor, responseDoc } = parts;

  function runSource(tenantId: string, agentId: string, runId: string, token: string) {
    return async function* watch(signal: AbortSignal): AsyncIterable<ReplySourceEvent> {
      // The one poll of this process for the run, shared with every other reply that reports it.
      for await (const run of deps.runPolls.states(tenantId, agentId, runId, token, signal)) {
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
      }
      // Stopped before the run ended (a cancel, or this process stopping): never a completed reply.
      throw new ReplyFailure('REPLY_INTERRUPTED', 'The chat service stopped following the agent run before it ended');
    };
  }

  async function startAgentCall(
    c: AuthedContext,
    req: chatV1.StartCallRequest,
    agentId: string,
    keyed: KeyedStart | null,
  ): Promise<StartedCall> {
    const { auth, token } = c;
    // A chat completion on an agent: a new run each time (no previous response to follow), its answer not kept.
    const completion = req.kind === 'completion';
    if (!ID_SHAPE.test(agentId)) throw modelNotFound(req.model);
    const profile = await peers.agent(agentId, token).catch((err: unknown) => {
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
    // A previous response's run that has not ended (it waits for approval, or still runs): this response follows it.
    let runId = '';
    let waiting = false;
    if (previous?.runId && previous.agentId === agentId) {
      const run = await peers.getRun(agentId, previous.runId, token);
      if (!['completed', 'failed', 'cancelled'].includes(run.status)) {
        runId = run.id;
        waiting = run.status === 'requires_approval';
      }
    }
    // A decision only for the run followed, while it waits for one.
    if (req.approvalRequestId && (req.approvalRequestId !== runId || !waiting))
      throw errors.validation([{ field: 'input', message: 'the approval request is not waiting for a decision' }]);
    // Following a run another response started: capped per tenant and per key (ReplySlots), and holding a call's
    // reservation like any call while it follows (given back at its end: the run bills its own model calls).
    const following = runId !== '';
    const projectId = metadata.project_id || session?.projectId || '';
    if (!runId) {
      if (!goal) throw errors.validation([{ field: 'input', message: 'must hold a user message (the goal of the agent run)' }]);
      if (!projectId)
        throw errors.badRequest('project_required', "An agent's run works in a project: give metadata.project_id", {
          param: 'metadata.project_id',
        });
      // Under the call's key: a call run again after a crash before its reply was stored finds the same run.
      runId = (await peers.executeAgent({ agentId, goal, projectId }, token, keyed?.key)).id;
    }
    const now = nowIso();
    const newSession: SessionDoc | null =
      session || !req.store
        ? null
        : { id: newId('chs'), tenantId: auth.tid, projectId, agentId, title: goal.slice(0, 200), createdAt: now };
    const sessionId = req.store ? (session ?? newSession)!.id : '';
    const inputs = req.store && goal ? [newMessage(auth, { role: 'user', content: goal, sessionId, projectId })] : [];
    // A completion has no response record: the reply names the agent as the model that answered.
    const reply = pendingReply(auth, replies.newLease(), {
      sessionId,
      projectId,
      ...(following ? { follower: true } : {}),
      ...(req.store ? {} : { ephemeral: true }),
      ...(completion ? { model: req.model } : {}),
      ...(keyed ? { idempotencyId: keyed.idempotencyId } : {}),
    });
    const resp = completion ? null : responseDoc(auth, req, reply, sessionId, { agentId, runId });
    const hold = following
      ? holdOf(reply.id, (await restPlan(peers, token, auth.tid, deps.pricing, '', profile.model)).plan, goal.length)
      : undefined;
    await startReply(deps, c, {
      ...(hold ? { hold } : {}),
      // The decision goes to the run once the follower is admitted (reserved, within its caps), never before.
      ...(req.approvalRequestId
        ? { beforeStart: () => peers.decideRun(agentId, runId, req.approve, req.approvalReason, token).then(() => undefined) }
        : {}),
      job: {
        message: reply,
        history: [],
        llm: { settings: { provider: 'openai-compatible' }, keySource: 'tenant' },
        durable: !completion,
        source: runSource(auth.tid, agentId, runId, token),
      },
      inputs,
      resp,
      newSession,
      commit: keyed?.commit({ messageId: reply.id, resp }),
    });
    // A completion nobody reads any more stops following the run (which goes on, and bills its own calls).
    return { resp, reply, durable: !completion };
  }

  return startAgentCall;
}
