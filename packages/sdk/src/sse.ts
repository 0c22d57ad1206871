/** A server-sent events reader over a fetch body, on `eventsource-parser` (browser-safe: web streams only). */
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { APIConnectionError, SvcError } from './errors';

export interface SseEvent<T = unknown> {
  id: string | undefined;
  event: string;
  data: T;
}

export async function* readSse(body: ReadableStream<Uint8Array>): AsyncGenerator<SseEvent> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let ready: EventSourceMessage[] = [];
  // The last id seen is the id of every later event that names none (the EventSource rule).
  let id: string | undefined;
  const parser = createParser({ onEvent: (e) => void ready.push(e) });
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      parser.feed(decoder.decode(value, { stream: true }));
      const events = ready;
      ready = [];
      for (const e of events) {
        if (e.id !== undefined) id = e.id;
        let data: unknown = e.data;
        try {
          data = JSON.parse(e.data);
        } catch {
          data = e.data;
        }
        yield { id, event: e.event || 'message', data };
      }
    }
  } finally {
    reader.releaseLock();
    await body.cancel().catch(() => undefined);
  }
}

export interface ResumeOptions {
  /** Where to start: the id (or cursor) of the last event already seen. */
  after?: string;
  /** How many dropped connections to resume before giving up (default 5). */
  maxResumes?: number;
  signal?: AbortSignal;
  /** The cursor an event leaves for a resume (default its `id:`). */
  cursorOf?: (e: SseEvent<any>) => string | undefined;
  /** The event that ends the stream; any other end of the body is a drop (a live stream never ends). */
  isLast?: (e: SseEvent<any>) => boolean;
  /** Runs each time a connection is open. */
  onOpen?: () => void;
  /** Runs before each resume, with the cursor it resumes after. */
  onResume?: (cursor: string | undefined) => void;
  /** Errors not worth a resume (an error answer of the API). */
  isFatal: (err: SvcError) => boolean;
  /** Waits before a resume (the client's jittered backoff). */
  pause: (resume: number) => Promise<void>;
}

/**
 * The events of a stream that survives dropped connections: `open(cursor)` (re)opens it after the last event seen
 * (`Last-Event-ID` on /api/v1, `starting_after` on /v1), so no event is lost or repeated.
 */
export async function* resumableSse(
  open: (cursor: string | undefined) => Promise<ReadableStream<Uint8Array>>,
  options: ResumeOptions,
): AsyncGenerator<SseEvent<any>> {
  let cursor = options.after;
  const cursorOf = options.cursorOf ?? ((e) => e.id);
  for (let resumes = 0; ;) {
    try {
      const body = await open(cursor);
      options.onOpen?.();
      for await (const e of readSse(body)) {
        cursor = cursorOf(e) ?? cursor;
        // An event arrived: the connection worked, so the count of drops in a row starts again.
        resumes = 0;
        yield e;
        if (options.isLast?.(e)) return;
      }
    } catch (err) {
      // An error answer may be final; anything else (a body cut off) is a dropped connection.
      if ((err instanceof SvcError && options.isFatal(err)) || options.signal?.aborted) throw err;
      if (resumes >= (options.maxResumes ?? 5)) throw err instanceof SvcError ? err : new APIConnectionError('The stream dropped', err);
    }
    // The connection dropped before the last event: resume after the last one seen.
    if (resumes++ >= (options.maxResumes ?? 5)) throw new APIConnectionError('The stream kept dropping');
    await options.pause(resumes);
    options.onResume?.(cursor);
  }
}
