/** A server-sent events reader for tests: real fetch, the stream parsed by eventsource-parser (as the SDK does). */
import { createParser } from 'eventsource-parser';
export interface SseEvent {
  id: string | undefined;
  event: string;
  data: any;
}

export interface SseResult {
  status: number;
  headers: Headers;
  events: SseEvent[];
  /** Comment lines (`: ...`) seen, e.g. keep-alives. */
  comments: number;
  /** The body when the answer was not a stream (a JSON error envelope). */
  body: any;
  /** True when `stopAfter` made the reader hang up before the stream ended. */
  hungUp: boolean;
}

export interface SseOptions {
  token?: string;
  headers?: Record<string, string>;
  /** Hang up (abort the request) once this returns true for the events so far (also asked once the stream opens). */
  stopAfter?: (events: SseEvent[], result: SseResult) => boolean;
  /** Called once the answer's headers arrived (the stream is open), before its body is read. */
  onOpen?: () => Promise<unknown>;
}

export async function readSse(url: string, options: SseOptions = {}): Promise<SseResult> {
  const controller = new AbortController();
  const headers: Record<string, string> = { accept: 'text/event-stream', ...options.headers };
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  const res = await fetch(url, { headers, signal: controller.signal });
  const result: SseResult = { status: res.status, headers: res.headers, events: [], comments: 0, body: undefined, hungUp: false };
  if (!res.headers.get('content-type')?.startsWith('text/event-stream')) {
    const text = await res.text();
    result.body = text ? JSON.parse(text) : undefined;
    return result;
  }
  await options.onOpen?.();
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  const parser = createParser({
    onEvent: (e) => void result.events.push({ id: e.id, event: e.event || 'message', data: JSON.parse(e.data) }),
    onComment: () => void result.comments++,
  });
  try {
    for (;;) {
      if (options.stopAfter?.(result.events, result)) {
        result.hungUp = true;
        controller.abort();
        break;
      }
      const { value, done } = await reader.read();
      if (done) break;
      parser.feed(decoder.decode(value, { stream: true }));
    }
  } catch (err) {
    if (!result.hungUp) throw err;
  }
  return result;
}

/** The deltas of a stream's events joined. */
export function joinedDeltas(events: SseEvent[]): string {
  return events
    .filter((e) => e.event === 'message.delta')
    .map((e) => e.data.delta as string)
    .join('');
}
