import { decodeSse, SseDecoder } from './sse';

const bytes = (s: string) => new TextEncoder().encode(s);

async function decodeAll(parts: Uint8Array[]) {
  async function* source() {
    for (const part of parts) yield part;
  }
  const out = [];
  for await (const message of decodeSse(source())) out.push(message);
  return out;
}

describe('SseDecoder', () => {
  it('dispatches events at blank lines, with event names, ids and multi-line data', () => {
    const decoder = new SseDecoder();
    const out = decoder.push(bytes('event: message_start\ndata: {"a":1}\n\nid: 7\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n'));
    expect(out).toEqual([
      { event: 'message_start', data: '{"a":1}' },
      { event: 'message', data: 'line1\nline2', id: '7' },
      { event: 'message', data: '[DONE]' },
    ]);
  });

  it('accepts CRLF and CR line ends, also when a CRLF is split between chunks', () => {
    const decoder = new SseDecoder();
    const out = [...decoder.push(bytes('data: a\r')), ...decoder.push(bytes('\n\r\ndata: b\r\r')), ...decoder.push(bytes('data:c\n\n'))];
    expect(out.map((m) => m.data)).toEqual(['a', 'b', 'c']);
  });

  it('skips comments and events without data', () => {
    const decoder = new SseDecoder();
    expect(decoder.push(bytes(': keep-alive\n\nevent: ping\n\ndata: x\n\n'))).toEqual([{ event: 'message', data: 'x' }]);
  });

  it('keeps multi-byte characters split across chunks intact', async () => {
    const whole = bytes('data: {"t":"héllo 😀"}\n\n');
    const parts = Array.from(whole, (b) => new Uint8Array([b]));
    const out = await decodeAll(parts);
    expect(out).toEqual([{ event: 'message', data: '{"t":"héllo 😀"}' }]);
  });

  it('drops a last event that is not closed by a blank line', async () => {
    const out = await decodeAll([bytes('data: complete\n\ndata: partial')]);
    expect(out.map((m) => m.data)).toEqual(['complete']);
  });
});
