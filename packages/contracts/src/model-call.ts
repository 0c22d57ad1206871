import type { eventsV1 } from '@svc/proto';

/** How a model call ended, for the request log: latency and time to first token in ms (0 when unknown or none). */
export interface CallOutcome {
  status: 'ok' | 'error' | 'cancelled';
  errorCode: string;
  latencyMs: number;
  ttftMs: number;
}

/** Who made a model call and what served it, as the request log keeps it (CONTRACT.md 12); '' where unknown. */
export interface CallOrigin {
  /** chat, agent, v1, passthrough, mcp */
  origin: string;
  requestId?: string;
  endUser?: string;
  entryId?: string;
  servedModel: string;
  userId?: string;
}

/** The `call` of a model call's usage (`llm.usage`, RecordUsage): one shape for every path that bills a call. */
export function modelCallInfo(who: CallOrigin, outcome: CallOutcome): eventsV1.ModelCallInfo {
  return {
    origin: who.origin,
    requestId: who.requestId ?? '',
    endUser: who.endUser ?? '',
    status: outcome.status,
    errorCode: outcome.errorCode,
    latencyMs: Math.max(0, Math.round(outcome.latencyMs)),
    ttftMs: Math.max(0, Math.round(outcome.ttftMs)),
    entryId: who.entryId ?? '',
    servedModel: who.servedModel,
    userId: who.userId ?? '',
  };
}
