import { LlmError, type LlmEvent } from '../types';

export interface Drained {
  events: LlmEvent[];
  /** The text deltas joined. */
  text: string;
  /** What the stream threw, if anything (an `LlmError` for every provider failure). */
  error: unknown;
}

/** Reads a stream to its end without throwing: every event seen, and the error that ended it, if any. */
export async function drain(stream: AsyncIterable<LlmEvent>, onEvent?: (event: LlmEvent) => void): Promise<Drained> {
  const events: LlmEvent[] = [];
  let error: unknown;
  try {
    for await (const event of stream) {
      events.push(event);
      onEvent?.(event);
    }
  } catch (err) {
    error = err;
  }
  const text = events.map((e) => (e.type === 'text' ? e.delta : '')).join('');
  return { events, text, error };
}

/** Narrows `drain(...).error` to an `LlmError`, failing loudly when it is anything else. */
export function llmError(error: unknown): LlmError {
  if (error instanceof LlmError) return error;
  throw new Error(`expected an LlmError, got ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`);
}

/** Polls until `check` is true or `timeoutMs` passes (then throws). */
export async function waitUntil(check: () => boolean, timeoutMs = 5000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
