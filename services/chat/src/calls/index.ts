/**
 * The model calls of the OpenAI-compatible API (CONTRACT.md 9): chat completions and responses, made as chat replies
 * so that they share the replies' reservations, billing, leases, crash sweep and per-key limits. A stored response
 * is a reply in a chat session (its input the user messages before it), so it shows in the session's transcript and
 * a session can be continued from either side. A response's stream is numbered by chunk, and each chunk is stored
 * before any reader sends it: a stream resumed after any event, from any process, continues exactly there.
 */
import { agentCall } from './agent-call';
import { embedCall } from './embed-call';
import { modelCalls } from './model-call';
import { responseReads } from './responses';
import { callParts, type CallDeps } from './shared';

export { AGENT_MODEL_PREFIX, recordOf, statusOf } from './records';
export type { CallDeps } from './shared';

export function callHandlers(deps: CallDeps) {
  const parts = callParts(deps);
  return { ...modelCalls(deps, parts, agentCall(deps, parts)), ...responseReads(deps, parts), ...embedCall(deps) };
}
