/** A server-sent events reader for tests: real fetch, the stream parsed as the EventSource spec reads it. */
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
  /** Hang up (abort the request) once this returns true for the events so far. */
  stopAfter?: (events: SseEvent[]) => boolean;
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
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let current: { id?: string; event?: string; data: string[] } = { data: [] };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let nl: number;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, nl).replace(/\r$/, '');
        buffer = buffer.slice(nl + 1);
        if (line === '') {
          if (current.data.length || current.event) {
            result.events.push({ id: current.id, event: current.event ?? 'message', data: JSON.parse(current.data.join('\n')) });
          }
          current = { data: [] };
          continue;
        }
        if (line.startsWith(':')) {
          result.comments++;
          continue;
        }
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        const val = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'id') current.id = val;
        else if (field === 'event') current.event = val;
        else if (field === 'data') current.data.push(val);
      }
      if (options.stopAfter?.(result.events)) {
        result.hungUp = true;
        controller.abort();
        break;
      }
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
