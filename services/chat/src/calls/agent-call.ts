/** Responses on an agent (`agent:<id>`): a reply whose source is the agent's run instead of a model. */
import { type AuthedContext, errors, newId, nowIso } from '@svc/kit';
import type { chatV1 } from '@svc/proto';
import type { SessionDoc, StoredApproval } from '../collections';
import { modelNotFound } from '../model-choice';
import { type ReplySourceEvent, ReplyFailure } from '../replies';
import { newMessage, pendingReply, startReply } from '../start-reply';
import { ID_SHAPE, type Send, sleep } from './records';
import type { CallDeps, CallParts } from './shared';

/** A call on `agent:<id>`: the agent's run (started, or a previous response's followed), reported when it stops. */
export function agentCall(deps: CallDeps, parts: CallParts) {
  const { replies, peers } = deps;
  const { sessionFor, responseDoc, follow } = parts;

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
    const inputs = req.store && goal ? [newMessage(auth, { role: 'user', content: goal, sessionId, projectId })] : [];
    const reply = pendingReply(auth, replies.newLease(), { sessionId, projectId, ...(req.store ? {} : { ephemeral: true }) });
    const resp = responseDoc(auth, req, reply, sessionId, { agentId, runId });
    await startReply(deps, c, {
      job: {
        message: reply,
        history: [],
        llm: { settings: { provider: 'openai-compatible' }, keySource: 'tenant' },
        durable: true,
        source: runSource(agentId, runId, token),
      },
      inputs,
      resp,
      newSession,
    });
    await follow(resp, reply, true, send, signal, req.finalOnly);
  }

  return startAgentCall;
}
