/** A server-sent events reader over a fetch body, on `eventsource-parser` (browser-safe: web streams only). */
import { createParser, type EventSourceMessage } from 'eventsource-parser';

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
