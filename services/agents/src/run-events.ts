import { addToOutbox, type StoreSession } from '@svc/kit';
import { type CallOutcome, domainEvent, modelCallInfo, TOPICS, domainMetrics } from '@svc/contracts';
import type { eventsV1 } from '@svc/proto';
import type { RunCall, RunDoc, Usage } from './collections';

export type RunEventType = 'agent.started' | 'agent.completed' | 'agent.failed';

/** The run as `agent.*` events carry it (the steps stay in the API). */
export function runData(r: RunDoc): eventsV1.AgentRunData {
  return {
    runId: r.id,
    agentId: r.agentId,
    projectId: r.projectId,
    status: r.status,
    output: r.output ?? '',
    error: r.error ?? '',
    inputTokens: r.usage.inputTokens,
    outputTokens: r.usage.outputTokens,
    startedAt: r.startedAt ?? '',
    completedAt: r.completedAt ?? '',
  };
}

export async function emitRunEvent(tx: StoreSession, type: RunEventType, run: RunDoc): Promise<void> {
  await addToOutbox(tx, domainEvent(TOPICS.agents, type, run.tenantId, { $case: 'agentRun', value: runData(run) }));
  // Counted as written (a transaction that retries counts again: rare, and a metric, not a ledger).
  if (type !== 'agent.started') domainMetrics.runs.inc({ status: run.status });
}

/** A call settled from what was stored (a crash, a cancel, a failure ended it): its timings are not known. */
const CUT: CallOutcome = { status: 'error', errorCode: 'CALL_INTERRUPTED', latencyMs: 0, ttftMs: 0 };

/** `llm.usage` for billing: one per model call, written with the step that recorded it. */
export async function emitUsage(
  tx: StoreSession,
  run: RunDoc,
  call: Pick<RunCall, 'provider' | 'model' | 'keySource' | 'name' | 'entryId' | 'price'> & {
    usage: Usage;
    estimated?: boolean;
    callId: string;
    outcome?: CallOutcome;
  },
): Promise<void> {
  const outcome = call.outcome ?? CUT;
  const value: eventsV1.UsageData = {
    source: 'agent_run',
    sourceId: run.id,
    provider: call.provider,
    model: call.name || call.model,
    ...(call.usage.cachedInputTokens ? { cachedInputTokens: call.usage.cachedInputTokens } : {}),
    ...(call.price ? { price: call.price } : {}),
    call: modelCallInfo(
      { origin: 'agent', requestId: run.requestId, entryId: call.entryId, servedModel: call.model, userId: run.userId },
      outcome,
    ),
    inputTokens: call.usage.inputTokens,
    outputTokens: call.usage.outputTokens,
    keySource: call.keySource,
    credentialId: run.credentialId ?? '',
    credentialType: run.credentialType ?? '',
    estimated: call.estimated ?? false,
    callId: call.callId,
    projectId: run.projectId,
    agentId: run.agentId,
  };
  await addToOutbox(tx, domainEvent(TOPICS.agents, 'llm.usage', run.tenantId, { $case: 'usage', value }));
  domainMetrics.llmTokens.inc({ source: 'agents', direction: 'input' }, value.inputTokens);
  domainMetrics.llmTokens.inc({ source: 'agents', direction: 'output' }, value.outputTokens);
}

/**
 * Bills a run's open call from what was stored of it (a crash, a cancel, a failure ended it): the provider's usage,
 * else the characters streamed (estimated, with the prompt), else nothing, which releases its reservation. Billing
 * applies one usage per call id, so a call also billed by its worker is billed once.
 */
export async function settleRecordedCall(tx: StoreSession, run: RunDoc, call: RunCall, outcome?: CallOutcome): Promise<void> {
  // The provider's usage; else, for a request that reached it, its prompt and what streamed at 4 characters a token.
  const usage: Usage =
    call.usage ?? (call.streamed > 0 || call.sent ? { inputTokens: call.promptTokens, outputTokens: Math.ceil(call.streamed / 4) } : NONE);
  await emitUsage(tx, run, { ...call, usage, estimated: !call.usage, callId: call.id, outcome });
}

const NONE: Usage = { inputTokens: 0, outputTokens: 0 };
