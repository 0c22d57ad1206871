/** A call's input (messages and tools as the gateway passed them on) checked and turned into the model's. */
import { errors } from '@svc/kit';
import type { LlmMessage, LlmTool, LlmToolCall } from '@svc/llm';
import type { chatV1 } from '@svc/proto';

function parseJsonObject(field: string, text: string): Record<string, unknown> {
  try {
    const v = JSON.parse(text) as unknown;
    if (v && typeof v === 'object' && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    // reported below
  }
  throw errors.validation([{ field, message: 'must be a JSON object' }]);
}

export function toLlmMessage(m: chatV1.InputMessage, i: number): LlmMessage {
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

export function toolsOf(req: chatV1.StartCallRequest): LlmTool[] {
  return req.tools.map((t, i) => ({
    name: t.name,
    description: t.description,
    parameters: t.parametersJson
      ? parseJsonObject(`tools[${i}].function.parameters`, t.parametersJson)
      : { type: 'object', properties: {} },
  }));
}
