/** A server-sent events reader (the EventSource parsing rules) over a fetch body. */
export interface SseEvent<T = unknown> {
  id: string | undefined;
  event: string;
  data: T;
}

export async function* readSse(body: ReadableStream<Uint8Array>): AsyncGenerator<SseEvent> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let id: string | undefined;
  let event = 'message';
  let data: string[] = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let nl: number;
      while ((nl = buffer.search(/\r?\n/)) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + (buffer[nl] === '\r' ? 2 : 1));
        if (line === '') {
          if (data.length) {
            const text = data.join('\n');
            let parsed: unknown = text;
            try {
              parsed = JSON.parse(text);
            } catch {
              parsed = text;
            }
            yield { id, event, data: parsed };
          }
          event = 'message';
          data = [];
          continue;
        }
        if (line.startsWith(':')) continue; // a comment (keep-alive)
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        const val = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'data') data.push(val);
        else if (field === 'event') event = val;
        else if (field === 'id') id = val;
      }
    }
  } finally {
    reader.releaseLock();
    await body.cancel().catch(() => undefined);
  }
}
