import type { chatV1 } from '@svc/proto';
import type { MessageDoc, SessionDoc } from './collections';

export function toSession(s: SessionDoc): chatV1.Session {
  return { id: s.id, projectId: s.projectId, agentId: s.agentId, title: s.title, createdAt: s.createdAt, model: s.model ?? '' };
}

export function toMessage(m: MessageDoc): chatV1.Message {
  return {
    id: m.id,
    sessionId: m.sessionId,
    role: m.role,
    content: m.content,
    projectId: m.projectId,
    status: m.status,
    createdAt: m.createdAt,
    completedAt: m.completedAt ?? '',
    errorCode: m.errorCode ?? '',
    errorMessage: m.errorMessage ?? '',
    model: m.model ?? '',
    usage:
      m.inputTokens !== null || m.outputTokens !== null
        ? { inputTokens: m.inputTokens ?? 0, outputTokens: m.outputTokens ?? 0 }
        : undefined,
  };
}
