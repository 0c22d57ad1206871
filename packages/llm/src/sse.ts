/**
 * Server-sent events in (the WHATWG event-stream format), for the providers' streams: bytes in, messages out, on
 * `eventsource-parser` (the one SSE parser of the repository: the SDK and the test and bench readers use it too).
 * Lines end in CRLF, LF or CR; `data:` lines of one event are joined with "\n"; comments (`:`) are skipped; an event
 * is dispatched at a blank line, and a last event with no blank line after it is dropped, as the spec says.
 */
import { createParser, type EventSourceParser } from 'eventsource-parser';

export interface SseMessage {
  /** The `event:` field, or `message` when the event named none. */
  event: string;
  data: string;
  id?: string;
}

export class SseDecoder {
  private readonly text = new TextDecoder('utf-8');
  private readonly parser: EventSourceParser;
  private out: SseMessage[] = [];

  constructor() {
    this.parser = createParser({
      onEvent: (e) =>
        this.out.push(
          e.id === undefined ? { event: e.event || 'message', data: e.data } : { event: e.event || 'message', data: e.data, id: e.id },
        ),
    });
  }

  /** Feeds bytes; returns the messages completed by them. */
  push(chunk: Uint8Array): SseMessage[] {
    return this.feed(this.text.decode(chunk, { stream: true }));
  }

  /** Ends the input. Returns nothing: an event not closed by a blank line is incomplete and dropped. */
  end(): SseMessage[] {
    const out = this.feed(this.text.decode());
    this.parser.reset();
    return out;
  }

  private feed(input: string): SseMessage[] {
    if (input) this.parser.feed(input);
    const out = this.out;
    this.out = [];
    return out;
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
