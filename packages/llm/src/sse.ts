/**
 * A server-sent events decoder (the WHATWG event-stream format): bytes in, messages out.
 * Lines end in CRLF, LF or CR; `data:` lines of one event are joined with "\n"; comments (`:`) are skipped;
 * an event is dispatched at a blank line, and a last event with no blank line after it is dropped, as the spec says.
 */

export interface SseMessage {
  /** The `event:` field, or `message` when the event named none. */
  event: string;
  data: string;
  id?: string;
}

export class SseDecoder {
  private readonly text = new TextDecoder('utf-8');
  private buffer = '';
  private pendingCr = false;
  private event = '';
  private data: string[] = [];
  private hasData = false;
  private id: string | undefined;

  /** Feeds bytes; returns the messages completed by them. */
  push(chunk: Uint8Array): SseMessage[] {
    return this.feed(this.text.decode(chunk, { stream: true }));
  }

  /** Ends the input. Returns nothing: an event not closed by a blank line is incomplete and dropped. */
  end(): SseMessage[] {
    const out = this.feed(this.text.decode());
    this.buffer = '';
    this.reset();
    return out;
  }

  private feed(input: string): SseMessage[] {
    const out: SseMessage[] = [];
    let s = input;
    if (this.pendingCr && s.startsWith('\n')) s = s.slice(1);
    this.pendingCr = false;
    this.buffer += s;
    let start = 0;
    for (let i = 0; i < this.buffer.length; i++) {
      const c = this.buffer.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      const line = this.buffer.slice(start, i);
      if (c === 13) {
        if (i + 1 < this.buffer.length) {
          if (this.buffer.charCodeAt(i + 1) === 10) i++;
        } else {
          this.pendingCr = true;
        }
      }
      start = i + 1;
      const message = this.line(line);
      if (message) out.push(message);
    }
    this.buffer = this.buffer.slice(start);
    return out;
  }

  private line(line: string): SseMessage | undefined {
    if (line === '') {
      if (!this.hasData) {
        this.reset();
        return undefined;
      }
      const message: SseMessage = { event: this.event || 'message', data: this.data.join('\n') };
      if (this.id !== undefined) message.id = this.id;
      this.reset();
      return message;
    }
    if (line.startsWith(':')) return undefined;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    switch (field) {
      case 'event':
        this.event = value;
        break;
      case 'data':
        this.data.push(value);
        this.hasData = true;
        break;
      case 'id':
        if (!value.includes('\0')) this.id = value;
        break;
      default:
        // `retry` and unknown fields do not matter to a one-shot stream.
        break;
    }
    return undefined;
  }

  private reset(): void {
    this.event = '';
    this.data = [];
    this.hasData = false;
    this.id = undefined;
  }
}

/** Decodes a stream of byte chunks into SSE messages. */
export async function* decodeSse(chunks: AsyncIterable<Uint8Array>): AsyncGenerator<SseMessage> {
  const decoder = new SseDecoder();
  for await (const chunk of chunks) {
    for (const message of decoder.push(chunk)) yield message;
  }
  for (const message of decoder.end()) yield message;
}
