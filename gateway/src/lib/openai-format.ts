/**
 * The OpenAI wire formats of the OpenAI-compatible API (CONTRACT.md 9), built from the chat service's call records:
 * chat completions (objects and chunks) and responses (objects and numbered stream events).
 *
 * A response stream is numbered from its record alone, so a resumed stream numbers every event as the first one did:
 * 0 `response.created`, 1 `response.in_progress`; when the reply has text (k chunks): 2 `output_item.added`,
 * 3 `content_part.added`, 4+i `output_text.delta` for chunk i, then `output_text.done`, `content_part.done`,
 * `output_item.done`; then per function call four events (added, arguments delta, arguments done, done); then an
 * agent's approval request (added, done); last `response.completed` or `response.incomplete`. A reply that failed
 * or was cancelled ends right after its chunks with `response.failed` (its response's status tells which).
 */
import type { chatV1 } from '@svc/proto';

export type CallRecord = chatV1.CallRecord;

const seconds = (iso: string) => (iso ? Math.floor(Date.parse(iso) / 1000) : null);
const suffix = (id: string) => id.slice(id.indexOf('_') + 1);
const parse = (json: string): Record<string, unknown> => (json ? (JSON.parse(json) as Record<string, unknown>) : {});

/** The chunk index a resumed stream must start from to send every event after `startingAfter`. */
export function firstChunkAfter(startingAfter: number): number {
  return Math.max(0, startingAfter - 3);
}

// ---- Chat Completions ----

export function completionId(rec: CallRecord): string {
  return `chatcmpl-${suffix(rec.messageId)}`;
}

export function completionUsage(rec: CallRecord) {
  const input = rec.usage?.inputTokens ?? 0;
  const output = rec.usage?.outputTokens ?? 0;
  return { prompt_tokens: input, completion_tokens: output, total_tokens: input + output };
}

function toolCallsOf(rec: CallRecord) {
  return rec.toolCalls.map((c) => ({ id: c.id, type: 'function' as const, function: { name: c.name, arguments: c.argumentsJson } }));
}

export function finishReasonOf(rec: CallRecord): string {
  if (rec.toolCalls.length) return 'tool_calls';
  return rec.finishReason === 'length' ? 'length' : 'stop';
}

export function completionObject(rec: CallRecord) {
  const tools = toolCallsOf(rec);
  return {
    id: completionId(rec),
    object: 'chat.completion',
    created: seconds(rec.createdAt),
    model: rec.servedModel || rec.model,
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: rec.content === '' && tools.length ? null : rec.content,
          refusal: null,
          ...(tools.length ? { tool_calls: tools } : {}),
          ...(rec.approval ? { agent_approval_request: approvalItem(rec) } : {}),
        },
        logprobs: null,
        finish_reason: finishReasonOf(rec),
      },
    ],
    usage: completionUsage(rec),
  };
}

export function completionChunk(rec: CallRecord, delta: Record<string, unknown>, finishReason: string | null = null, includeUsage = false) {
  return {
    id: completionId(rec),
    object: 'chat.completion.chunk',
    created: seconds(rec.createdAt),
    model: rec.servedModel || rec.model,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
    ...(includeUsage ? { usage: null } : {}),
  };
}

/**
 * The chunks that close a completed completion: its tool calls, an agent's approval request, the finish reason, and
 * the usage when asked for.
 */
export function closingChunks(rec: CallRecord, includeUsage: boolean): unknown[] {
  const out: unknown[] = [];
  toolCallsOf(rec).forEach((call, index) => out.push(completionChunk(rec, { tool_calls: [{ index, ...call }] }, null, includeUsage)));
  if (rec.approval) out.push(completionChunk(rec, { agent_approval_request: approvalItem(rec) }, null, includeUsage));
  out.push(completionChunk(rec, {}, finishReasonOf(rec), includeUsage));
  if (includeUsage)
    out.push({
      id: completionId(rec),
      object: 'chat.completion.chunk',
      created: seconds(rec.createdAt),
      model: rec.servedModel || rec.model,
      choices: [],
      usage: completionUsage(rec),
    });
  return out;
}

// ---- Responses ----

export function modelOf(rec: CallRecord): string {
  return rec.model.startsWith('agent:') ? rec.model : rec.servedModel || rec.model;
}

function messageItem(rec: CallRecord, status: 'in_progress' | 'completed' | 'incomplete', text?: string) {
  return {
    id: rec.messageId,
    type: 'message',
    status,
    role: 'assistant',
    content: text === undefined ? [] : [{ type: 'output_text', text, annotations: [], logprobs: [] }],
  };
}

function functionItems(rec: CallRecord) {
  return rec.toolCalls.map((c, i) => ({
    id: `fc_${i}_${suffix(rec.messageId)}`,
    type: 'function_call',
    status: 'completed',
    call_id: c.id,
    name: c.name,
    arguments: c.argumentsJson,
  }));
}

/** An agent's run waiting for approval: approve or reject it through the REST API (or the next response's input). */
function approvalItem(rec: CallRecord) {
  const a = rec.approval!;
  return {
    id: a.runId,
    type: 'agent_approval_request',
    run_id: a.runId,
    agent_id: a.agentId,
    name: a.toolName,
    call_id: a.toolCallId,
    arguments: a.argumentsJson,
  };
}

export function outputOf(rec: CallRecord): unknown[] {
  const out: unknown[] = [];
  if (rec.chunks > 0 || rec.content) out.push(messageItem(rec, rec.status === 'completed' ? 'completed' : 'incomplete', rec.content));
  if (rec.status === 'completed' || rec.status === 'incomplete') {
    out.push(...functionItems(rec));
    if (rec.approval) out.push(approvalItem(rec));
  }
  return out;
}

function usageOf(rec: CallRecord) {
  if (!rec.usage) return null;
  const { inputTokens, outputTokens } = rec.usage;
  return {
    input_tokens: inputTokens,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: outputTokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: inputTokens + outputTokens,
  };
}

/** The response object. `snapshot`: as it was when it started (the created and in_progress events). */
export function responseObject(rec: CallRecord, snapshot?: 'queued' | 'in_progress') {
  const echo = parse(rec.echoJson);
  const status = snapshot ?? rec.status;
  const failed = !snapshot && (rec.status === 'failed' || rec.status === 'cancelled');
  const metadata = parse(rec.metadataJson);
  return {
    id: rec.id,
    object: 'response',
    created_at: seconds(rec.createdAt),
    status,
    background: rec.background,
    error: failed ? { code: rec.errorCode.toLowerCase() || 'server_error', message: rec.errorMessage || 'The response failed' } : null,
    incomplete_details: !snapshot && rec.status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    instructions: rec.instructions || null,
    max_output_tokens: (echo.max_output_tokens as number | undefined) ?? null,
    metadata,
    model: modelOf(rec),
    output: snapshot ? [] : outputOf(rec),
    parallel_tool_calls: (echo.parallel_tool_calls as boolean | undefined) ?? true,
    previous_response_id: rec.previousResponseId || null,
    conversation: rec.sessionId ? { id: rec.sessionId } : null,
    store: rec.store,
    temperature: (echo.temperature as number | undefined) ?? null,
    text: { format: { type: 'text' } },
    tool_choice: echo.tool_choice ?? 'auto',
    tools: echo.tools ?? [],
    top_p: (echo.top_p as number | undefined) ?? null,
    truncation: 'disabled',
    usage: snapshot ? null : usageOf(rec),
    user: (echo.user as string | undefined) ?? null,
    completed_at: snapshot ? null : seconds(rec.completedAt),
  };
}

/**
 * Writes a response's numbered events: `start` (created, in_progress), each `delta` as it comes, then `finish` from
 * the final record. Events numbered up to `startingAfter` are skipped (a resumed stream).
 */
export class ResponseEvents {
  private textOpened = false;

  constructor(
    private readonly started: CallRecord,
    private readonly startingAfter: number,
    private readonly write: (event: string) => void,
  ) {}

  private emit(seq: number, body: Record<string, unknown>): void {
    if (seq <= this.startingAfter) return;
    this.write(`event: ${body.type as string}\ndata: ${JSON.stringify({ ...body, sequence_number: seq })}\n\n`);
  }

  start(): void {
    const rec = this.started;
    this.emit(0, { type: 'response.created', response: responseObject(rec, rec.background ? 'queued' : 'in_progress') });
    this.emit(1, { type: 'response.in_progress', response: responseObject(rec, 'in_progress') });
  }

  private openText(): void {
    if (this.textOpened) return;
    this.textOpened = true;
    const rec = this.started;
    this.emit(2, { type: 'response.output_item.added', output_index: 0, item: messageItem(rec, 'in_progress') });
    this.emit(3, {
      type: 'response.content_part.added',
      item_id: rec.messageId,
      output_index: 0,
      content_index: 0,
      part: { type: 'output_text', text: '', annotations: [], logprobs: [] },
    });
  }

  delta(index: number, text: string): void {
    this.openText();
    this.emit(4 + index, {
      type: 'response.output_text.delta',
      item_id: this.started.messageId,
      output_index: 0,
      content_index: 0,
      delta: text,
      logprobs: [],
    });
  }

  finish(rec: CallRecord): void {
    const k = rec.chunks;
    let next = 2;
    if (k > 0) {
      this.openText();
      next = 4 + k;
      if (rec.status === 'failed' || rec.status === 'cancelled')
        return this.emit(next, { type: 'response.failed', response: responseObject(rec) });
      const part = { type: 'output_text', text: rec.content, annotations: [], logprobs: [] };
      const base = { item_id: rec.messageId, output_index: 0, content_index: 0 };
      this.emit(next++, { type: 'response.output_text.done', ...base, text: rec.content, logprobs: [] });
      this.emit(next++, { type: 'response.content_part.done', ...base, part });
      this.emit(next++, { type: 'response.output_item.done', output_index: 0, item: messageItem(rec, 'completed', rec.content) });
    } else if (rec.status === 'failed' || rec.status === 'cancelled') {
      return this.emit(next, { type: 'response.failed', response: responseObject(rec) });
    }
    let index = k > 0 ? 1 : 0;
    for (const item of functionItems(rec)) {
      this.emit(next++, {
        type: 'response.output_item.added',
        output_index: index,
        item: { ...item, status: 'in_progress', arguments: '' },
      });
      this.emit(next++, { type: 'response.function_call_arguments.delta', item_id: item.id, output_index: index, delta: item.arguments });
      this.emit(next++, {
        type: 'response.function_call_arguments.done',
        item_id: item.id,
        output_index: index,
        name: item.name,
        arguments: item.arguments,
      });
      this.emit(next++, { type: 'response.output_item.done', output_index: index, item });
      index++;
    }
    if (rec.approval) {
      const item = approvalItem(rec);
      this.emit(next++, { type: 'response.output_item.added', output_index: index, item });
      this.emit(next++, { type: 'response.output_item.done', output_index: index, item });
    }
    this.emit(next, { type: rec.status === 'incomplete' ? 'response.incomplete' : 'response.completed', response: responseObject(rec) });
  }
}
