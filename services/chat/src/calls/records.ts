/** A call as the gateway sees it: its record and status as OpenAI names them, and the events of its stream. */
import type { chatV1 } from '@svc/proto';
import type { MessageDoc, ResponseDoc } from '../collections';

export const AGENT_MODEL_PREFIX = 'agent:';
export const ID_SHAPE = /^[a-z]{2,8}_[0-9A-Za-z]{1,64}$/;

export type Send = (m: { event: chatV1.CallEvent }) => Promise<void>;

export const TERMINAL = new Set(['completed', 'failed']);
export const sleep = (ms: number, signal: AbortSignal) =>
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

export function endsOf(m: MessageDoc): number[] {
  return m.ends ?? (m.content ? [m.content.length] : []);
}

export function chunkOf(m: MessageDoc, ends: number[], i: number): string {
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

export const event = (type: string, fields: Partial<chatV1.CallEvent> = {}): { event: chatV1.CallEvent } => ({
  event: { type, call: undefined, index: 0, delta: '', servedModel: '', ...fields },
});
