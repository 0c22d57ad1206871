import { Readable } from 'node:stream';
import { meteredStream, prepareBody, StreamMeter } from './passthrough-meter';

const sse = (...events: Array<{ event?: string; data: unknown }>) =>
  events
    .map((e) => `${e.event ? `event: ${e.event}\n` : ''}data: ${typeof e.data === 'string' ? e.data : JSON.stringify(e.data)}\n\n`)
    .join('');

/** Passes `text` through a metered stream in chunks of `size` bytes; returns what came out. */
async function pass(meter: StreamMeter, text: string, size: number): Promise<string> {
  const bytes = Buffer.from(text);
  const chunks = Array.from({ length: Math.ceil(bytes.length / size) }, (_, i) => bytes.subarray(i * size, (i + 1) * size));
  const out: Buffer[] = [];
  for await (const part of Readable.from(chunks).pipe(meteredStream(meter, 1 << 20, () => new Error('too large'))))
    out.push(Buffer.from(part));
  return Buffer.concat(out).toString('utf8');
}

describe('StreamMeter', () => {
  it("reads a Responses stream's usage from response.completed", async () => {
    const meter = new StreamMeter(false);
    await pass(
      meter,
      sse(
        { event: 'response.output_text.delta', data: { type: 'response.output_text.delta', delta: 'Hello' } },
        {
          event: 'response.completed',
          data: {
            type: 'response.completed',
            response: { model: 'gpt-4o-2024', usage: { input_tokens: 30, output_tokens: 7, input_tokens_details: { cached_tokens: 10 } } },
          },
        },
      ),
      7,
    );
    expect(meter.usage(999)).toEqual({ inputTokens: 30, outputTokens: 7, cachedInputTokens: 10 });
    expect(meter.servedModel).toBe('gpt-4o-2024');
  });

  it("reads Anthropic's input from message_start and its output from the last message_delta", async () => {
    const meter = new StreamMeter(false);
    await pass(
      meter,
      sse(
        {
          event: 'message_start',
          data: { type: 'message_start', message: { model: 'claude-x', usage: { input_tokens: 50, output_tokens: 1 } } },
        },
        { event: 'content_block_delta', data: { type: 'content_block_delta', delta: { type: 'text_delta', text: 'hi there' } } },
        { event: 'message_delta', data: { type: 'message_delta', usage: { output_tokens: 12 } } },
      ),
      5,
    );
    expect(meter.usage(999)).toEqual({ inputTokens: 50, outputTokens: 12, cachedInputTokens: 0 });
  });

  it('estimates a cut stream from its streamed text, the prompt at its bound, and bills nothing when nothing came', async () => {
    const meter = new StreamMeter(false);
    await pass(meter, sse({ data: { choices: [{ index: 0, delta: { content: '漢字'.repeat(10) } }] } }), 4);
    expect(meter.usage(321)).toEqual({ inputTokens: 321, outputTokens: 5, cachedInputTokens: 0 });
    expect(new StreamMeter(false).usage(321)).toBeNull();
  });

  it('passes every event through, multi-byte characters split across chunks whole, and hides the usage chunk when asked', async () => {
    const text = sse(
      { data: { choices: [{ index: 0, delta: { content: 'ü漢字' } }] } },
      { data: { choices: [], usage: { prompt_tokens: 3, completion_tokens: 2 } } },
      { data: '[DONE]' },
    );
    expect(await pass(new StreamMeter(false), text, 3)).toBe(text);
    const hidden = new StreamMeter(true);
    const out = await pass(hidden, text, 3);
    expect(out).not.toContain('prompt_tokens');
    expect(out).toContain('ü漢字');
    expect(out).toContain('[DONE]');
    expect(hidden.usage(0)).toMatchObject({ inputTokens: 3, outputTokens: 2 });
  });
});

describe('prepareBody', () => {
  const json = (o: unknown) => Buffer.from(JSON.stringify(o));
  it('puts the output bound each endpoint takes, and include_usage on a streamed chat', () => {
    const chat = prepareBody('openai', '/chat/completions', json({ model: 'm', stream: true, messages: [] }), 'application/json', 99);
    expect(JSON.parse(String(chat.body))).toMatchObject({ max_completion_tokens: 99, stream_options: { include_usage: true } });
    expect(chat).toMatchObject({ model: 'm', maxTokens: 99, stream: true, clientWantsUsage: false });
    const responses = prepareBody('openai', '/responses', json({ model: 'm', stream: true, input: 'x' }), 'application/json', 99);
    expect(JSON.parse(String(responses.body))).toEqual({ model: 'm', stream: true, input: 'x', max_output_tokens: 99 });
    const messages = prepareBody('anthropic', '/messages', json({ model: 'c', messages: [] }), 'application/json', 99);
    expect(JSON.parse(String(messages.body))).toMatchObject({ max_tokens: 99 });
  });

  it('leaves a body that has its bound, is not JSON, or goes to another endpoint as it came', () => {
    const given = json({ model: 'm', max_tokens: 5, messages: [] });
    expect(prepareBody('openai', '/chat/completions', given, 'application/json', 99)).toMatchObject({ body: given, maxTokens: 5 });
    const embed = json({ model: 'e', input: 'x' });
    expect(prepareBody('openai', '/embeddings', embed, 'application/json', 99)).toMatchObject({ body: embed, maxTokens: 0 });
    const form = Buffer.from('a=b');
    expect(prepareBody('openai', '/audio/transcriptions', form, 'multipart/form-data', 99).body).toBe(form);
  });
});
