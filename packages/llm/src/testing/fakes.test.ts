/**
 * The fakes themselves: their wire format, checked byte-level and with the official SDKs' own stream parsers and
 * accumulators (not ours), their validation, and their scripting.
 */
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { SseDecoder, type SseMessage } from '../sse';
import { BedrockRuntimeClient, ConverseCommand, ConverseStreamCommand } from '@aws-sdk/client-bedrock-runtime';
import { TransportRequestHandler } from '../bedrock';
import { sendHttp } from '../http';
import {
  echoText,
  splitText,
  startFakeAnthropic,
  startFakeBedrock,
  startFakeGemini,
  startFakeOpenAI,
  type FakeProviderServer,
} from './index';

async function readSse(response: Response): Promise<SseMessage[]> {
  const decoder = new SseDecoder();
  const out = decoder.push(new Uint8Array(await response.arrayBuffer()));
  return [...out, ...decoder.end()];
}

describe('fake OpenAI server', () => {
  let fake: FakeProviderServer;
  const KEY = 'sk-fake-openai-key-000111222';
  const post = (body: object, headers: Record<string, string> = { authorization: `Bearer ${KEY}` }) =>
    fetch(`${fake.url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });

  beforeAll(async () => {
    fake = await startFakeOpenAI({ apiKey: KEY });
  });
  afterEach(() => fake.reset());
  afterAll(() => fake.close());

  it('streams chat.completion.chunk lines, a usage chunk when asked, then [DONE]', async () => {
    fake.script({ type: 'text', text: 'abcdefghij', chunks: 3 });
    const response = await post({
      model: 'gpt-x',
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const messages = await readSse(response);
    expect(messages[messages.length - 1].data).toBe('[DONE]');
    const chunks = messages.slice(0, -1).map((m) => JSON.parse(m.data));
    expect(chunks.every((c) => c.object === 'chat.completion.chunk' && c.model === 'gpt-x')).toBe(true);
    expect(chunks[0].choices[0].delta.role).toBe('assistant');
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe('abcdefghij');
    expect(chunks.filter((c) => c.choices[0]?.delta?.content)).toHaveLength(3);
    const finish = chunks[chunks.length - 2];
    expect(finish.choices[0]).toMatchObject({ delta: {}, finish_reason: 'stop' });
    const usage = chunks[chunks.length - 1];
    expect(usage.choices).toEqual([]);
    expect(usage.usage).toMatchObject({ prompt_tokens: 1, completion_tokens: 3, total_tokens: 4 });
    expect(chunks.slice(0, -1).every((c) => c.usage === null)).toBe(true);
  });

  it('sends no usage without stream_options.include_usage', async () => {
    const response = await post({ model: 'gpt-x', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    const chunks = (await readSse(response)).slice(0, -1).map((m) => JSON.parse(m.data));
    expect(chunks.some((c) => 'usage' in c)).toBe(false);
  });

  it('splits tool-call arguments over chunks: id, type and name first, then argument fragments by index', async () => {
    fake.script({ type: 'tool_calls', argumentChunks: 4, toolCalls: [{ id: 'call_1', name: 'f', arguments: { a: 1, b: 'two' } }] });
    const response = await post({ model: 'gpt-x', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    const chunks = (await readSse(response)).slice(0, -1).map((m) => JSON.parse(m.data));
    const parts = chunks.flatMap((c) => c.choices[0]?.delta?.tool_calls ?? []);
    expect(parts[0]).toEqual({ index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '' } });
    const fragments = parts.slice(1);
    expect(fragments).toHaveLength(4);
    expect(fragments.every((p: { index: number; id?: string }) => p.index === 0 && p.id === undefined)).toBe(true);
    expect(fragments.map((p: { function: { arguments: string } }) => p.function.arguments).join('')).toBe('{"a":1,"b":"two"}');
    expect(chunks[chunks.length - 1].choices[0].finish_reason).toBe('tool_calls');
  });

  it("is understood by the official openai SDK's own stream accumulator", async () => {
    fake.script({
      type: 'tool_calls',
      text: 'Calling.',
      argumentChunks: 5,
      toolCalls: [
        { id: 'call_1', name: 'get_weather', arguments: { city: 'Oslo' } },
        { id: 'call_2', name: 'get_time', arguments: { zone: 'UTC' } },
      ],
    });
    const client = new OpenAI({ apiKey: KEY, baseURL: fake.url, maxRetries: 0 });
    const stream = client.chat.completions.stream({
      model: 'gpt-x',
      messages: [{ role: 'user', content: 'hi' }],
      stream_options: { include_usage: true },
    });
    const completion = await stream.finalChatCompletion();
    const message = completion.choices[0].message;
    expect(message.content).toBe('Calling.');
    expect(
      message.tool_calls?.map((c) => (c.type === 'function' ? [c.id, c.function.name, JSON.parse(c.function.arguments)] : null)),
    ).toEqual([
      ['call_1', 'get_weather', { city: 'Oslo' }],
      ['call_2', 'get_time', { zone: 'UTC' }],
    ]);
    expect(completion.choices[0].finish_reason).toBe('tool_calls');
    expect(completion.usage?.completion_tokens).toBeGreaterThan(0);
  });

  it('answers without stream with one chat.completion object', async () => {
    const response = await post({ model: 'gpt-x', messages: [{ role: 'user', content: 'plain' }] });
    const body = (await response.json()) as any;
    expect(body).toMatchObject({
      object: 'chat.completion',
      choices: [{ index: 0, message: { role: 'assistant', content: echoText('plain') }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 2 },
    });
  });

  it('rejects a wrong key with 401 in the OpenAI error format, quoting only a masked key', async () => {
    const response = await post(
      { model: 'gpt-x', messages: [{ role: 'user', content: 'x' }] },
      { authorization: 'Bearer sk-wrong-key-abcdef123456' },
    );
    expect(response.status).toBe(401);
    const body = (await response.json()) as any;
    expect(body.error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_api_key' });
    expect(body.error.message).not.toContain('sk-wrong-key-abcdef123456');
    expect(fake.requests).toHaveLength(1);
  });

  it('validates the request like the API: 400 without messages, 404 on an unknown path', async () => {
    expect((await post({ model: 'gpt-x', messages: [] })).status).toBe(400);
    const notFound = await fetch(`${fake.url}/completions`, { method: 'POST', headers: { authorization: `Bearer ${KEY}` }, body: '{}' });
    expect(notFound.status).toBe(404);
    const models = await fetch(`${fake.url}/models`, { headers: { authorization: `Bearer ${KEY}` } });
    expect(((await models.json()) as any).data[0].id).toBe('fake-model');
  });

  it('plays an error N times, then the next behaviour, and counts what is pending', async () => {
    fake.script({ type: 'error', status: 500, times: 2 }, { type: 'text', text: 'third time' });
    expect(fake.pending()).toBe(3);
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) statuses.push((await post({ model: 'gpt-x', messages: [{ role: 'user', content: 'x' }] })).status);
    expect(statuses).toEqual([500, 500, 200]);
    expect(fake.pending()).toBe(0);
  });

  it('lets a default handler choose replies from the conversation (an agent loop)', async () => {
    fake.setDefault((request) => {
      const last = request.conversation!.messages[request.conversation!.messages.length - 1];
      return last.role === 'tool'
        ? { type: 'text', text: `The tool said ${last.text}` }
        : { type: 'tool_calls', toolCalls: [{ id: 'call_9', name: request.conversation!.tools[0], arguments: { q: last.text } }] };
    });
    try {
      const client = new OpenAI({ apiKey: KEY, baseURL: fake.url, maxRetries: 0 });
      const tools = [{ type: 'function' as const, function: { name: 'search', parameters: { type: 'object' } } }];
      const first = await client.chat.completions.create({ model: 'm', tools, messages: [{ role: 'user', content: 'find cats' }] });
      expect(first.choices[0].message.tool_calls?.[0]).toMatchObject({
        id: 'call_9',
        function: { name: 'search', arguments: '{"q":"find cats"}' },
      });
      const second = await client.chat.completions.create({
        model: 'm',
        tools,
        messages: [
          { role: 'user', content: 'find cats' },
          { role: 'assistant', content: null, tool_calls: first.choices[0].message.tool_calls },
          { role: 'tool', tool_call_id: 'call_9', content: '3 cats' },
        ],
      });
      expect(second.choices[0].message.content).toBe('The tool said 3 cats');
    } finally {
      fake.setDefault(undefined);
    }
  });
});

describe('fake Anthropic server', () => {
  let fake: FakeProviderServer;
  const KEY = 'sk-ant-fake-key-000111222';
  const headers = { 'content-type': 'application/json', 'x-api-key': KEY, 'anthropic-version': '2023-06-01' };
  const post = (body: object, h: Record<string, string> = headers) =>
    fetch(`${fake.url}/v1/messages`, { method: 'POST', headers: h, body: JSON.stringify(body) });

  beforeAll(async () => {
    fake = await startFakeAnthropic({ apiKey: KEY });
  });
  afterEach(() => fake.reset());
  afterAll(() => fake.close());

  it('streams the Messages event sequence with text and tool_use blocks', async () => {
    fake.script({
      type: 'tool_calls',
      text: 'Hi there',
      argumentChunks: 3,
      toolCalls: [{ id: 'toolu_1', name: 'f', arguments: { x: [1, 2] } }],
    });
    const response = await post({ model: 'claude-x', max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'hello' }] });
    expect(response.status).toBe(200);
    const messages = await readSse(response);
    expect(messages.map((m) => m.event)).toEqual([
      'message_start',
      'ping',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    const data = messages.map((m) => JSON.parse(m.data));
    expect(data.every((d, i) => d.type === messages[i].event)).toBe(true);
    expect(data[0].message).toMatchObject({ role: 'assistant', model: 'claude-x', usage: { input_tokens: 2 } });
    expect(data[6].content_block).toEqual({ type: 'tool_use', id: 'toolu_1', name: 'f', input: {} });
    const json = data.filter((d) => d.delta?.type === 'input_json_delta').map((d) => d.delta.partial_json);
    expect(json.join('')).toBe('{"x":[1,2]}');
    expect(data[12]).toMatchObject({ delta: { stop_reason: 'tool_use' }, usage: { output_tokens: expect.any(Number) } });
  });

  it("is understood by the official Anthropic SDK's own stream accumulator", async () => {
    fake.script({
      type: 'tool_calls',
      text: 'Let me check.',
      argumentChunks: 4,
      toolCalls: [{ id: 'toolu_7', name: 'get_weather', arguments: { city: 'Lima' } }],
    });
    const client = new Anthropic({ apiKey: KEY, baseURL: fake.url, maxRetries: 0 });
    const message = await client.messages
      .stream({ model: 'claude-x', max_tokens: 100, messages: [{ role: 'user', content: 'weather?' }] })
      .finalMessage();
    expect(message.content).toEqual([
      expect.objectContaining({ type: 'text', text: 'Let me check.' }),
      expect.objectContaining({ type: 'tool_use', id: 'toolu_7', name: 'get_weather', input: { city: 'Lima' } }),
    ]);
    expect(message.stop_reason).toBe('tool_use');
    expect(fake.requests[0].headers['x-api-key']).toBe(KEY);
    expect(fake.requests[0].headers['anthropic-version']).toBe('2023-06-01');
  });

  it('answers without stream with one message object', async () => {
    const response = await post({ model: 'claude-x', max_tokens: 100, system: 'be brief', messages: [{ role: 'user', content: 'plain' }] });
    const body = (await response.json()) as any;
    expect(body).toMatchObject({
      type: 'message',
      role: 'assistant',
      content: [{ type: 'text', text: echoText('plain') }],
      stop_reason: 'end_turn',
    });
    expect(fake.requests[0].conversation?.system).toBe('be brief');
  });

  it('validates like the API: headers, max_tokens, no system role in messages', async () => {
    const noKey: Record<string, string> = { ...headers };
    delete noKey['x-api-key'];
    const missingKey = await post({ model: 'c', max_tokens: 1, messages: [{ role: 'user', content: 'x' }] }, noKey);
    expect(missingKey.status).toBe(401);
    expect(((await missingKey.json()) as any).error.type).toBe('authentication_error');
    const noVersion: Record<string, string> = { ...headers };
    delete noVersion['anthropic-version'];
    expect((await post({ model: 'c', max_tokens: 1, messages: [{ role: 'user', content: 'x' }] }, noVersion)).status).toBe(400);
    expect((await post({ model: 'c', messages: [{ role: 'user', content: 'x' }] })).status).toBe(400);
    const systemRole = await post({ model: 'c', max_tokens: 1, messages: [{ role: 'system', content: 'x' }] });
    expect(systemRole.status).toBe(400);
    expect(((await systemRole.json()) as any).error).toMatchObject({
      type: 'invalid_request_error',
      message: expect.stringContaining('system'),
    });
  });

  it('sends 429 with retry-after: 0 and 529 overloaded in the API error format', async () => {
    fake.script({ type: 'error', status: 429 }, { type: 'error', status: 529 });
    const limited = await post({ model: 'c', max_tokens: 1, messages: [{ role: 'user', content: 'x' }] });
    expect(limited.status).toBe(429);
    expect(limited.headers.get('retry-after')).toBe('0');
    expect(((await limited.json()) as any).error.type).toBe('rate_limit_error');
    const overloaded = await post({ model: 'c', max_tokens: 1, messages: [{ role: 'user', content: 'x' }] });
    expect(overloaded.status).toBe(529);
    expect(((await overloaded.json()) as any).error.type).toBe('overloaded_error');
  });
});

describe('splitText', () => {
  it('splits into words by default and into n near-equal pieces on request; pieces always join back', () => {
    expect(splitText('Echo: hello  world ')).toEqual(['Echo: ', 'hello  ', 'world ']);
    expect(splitText('abcdefg', 3)).toEqual(['ab', 'cd', 'efg']);
    expect(splitText('ab', 5)).toEqual(['a', 'b']);
    expect(splitText('', 3)).toEqual([]);
    const emoji = 'a😀b😀c';
    expect(splitText(emoji, 5).join('')).toBe(emoji);
    expect(splitText(emoji, 5)).toHaveLength(5);
  });
});

describe('fake Gemini API', () => {
  let fake: FakeProviderServer;
  beforeAll(async () => {
    fake = await startFakeGemini({ apiKey: 'g-key' });
  });
  afterAll(() => fake.close());

  it('answers generateContent (not streamed) with one response: all parts, finishReason and usageMetadata', async () => {
    fake.script({
      type: 'tool_calls',
      text: 'Calling.',
      toolCalls: [{ name: 'f', arguments: { a: 1 } }],
      usage: { inputTokens: 9, outputTokens: 4 },
    });
    const response = await fetch(`${fake.url}/models/gemini-x:generateContent`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-goog-api-key': 'g-key' },
      body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'hi' }] }] }),
    });
    expect(response.status).toBe(200);
    const body = (await response.json()) as Record<string, any>;
    expect(body.candidates[0]).toMatchObject({
      content: { role: 'model', parts: [{ text: 'Calling.' }, { functionCall: { name: 'f', args: { a: 1 } } }] },
      finishReason: 'STOP',
    });
    expect(body.usageMetadata).toEqual({ promptTokenCount: 9, candidatesTokenCount: 4, totalTokenCount: 13 });
  });

  it('refuses a wrong key with 400 API_KEY_INVALID and a bad role with 400', async () => {
    const post = (key: string, contents: unknown) =>
      fetch(`${fake.url}/models/m:streamGenerateContent?alt=sse`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-goog-api-key': key },
        body: JSON.stringify({ contents }),
      });
    const wrong = await post('nope', [{ role: 'user', parts: [{ text: 'x' }] }]);
    expect(wrong.status).toBe(400);
    expect(((await wrong.json()) as any).error.details[0].reason).toBe('API_KEY_INVALID');
    const role = await post('g-key', [{ role: 'assistant', parts: [{ text: 'x' }] }]);
    expect(role.status).toBe(400);
  });
});

describe('fake Bedrock runtime, read by the official SDK', () => {
  let fake: FakeProviderServer;
  beforeAll(async () => {
    fake = await startFakeBedrock({ region: 'us-east-1' });
  });
  afterAll(() => fake.close());
  const client = (region = 'us-east-1') =>
    new BedrockRuntimeClient({
      region,
      endpoint: fake.url,
      credentials: { accessKeyId: 'AKIAFAKE', secretAccessKey: 'secret' },
      maxAttempts: 1,
      // HTTP/1.1 (the SDK's default for Bedrock is HTTP/2); the SDK's own signing and deserializers do the rest.
      requestHandler: new TransportRequestHandler(sendHttp),
    });

  it("answers Converse (not streamed) in the shape the SDK's deserializer reads", async () => {
    fake.script({ type: 'text', text: 'whole answer', usage: { inputTokens: 5, outputTokens: 2 } });
    const out = await client().send(new ConverseCommand({ modelId: 'm', messages: [{ role: 'user', content: [{ text: 'hi' }] }] }));
    expect(out.output?.message?.content).toEqual([{ text: 'whole answer' }]);
    expect(out.stopReason).toBe('end_turn');
    expect(out.usage).toMatchObject({ inputTokens: 5, outputTokens: 2, totalTokens: 7 });
  });

  it("streams ConverseStream frames that the SDK's own event-stream decoder reads, in order", async () => {
    fake.script({ type: 'text', text: 'a b c', usage: { inputTokens: 4, outputTokens: 3 } });
    const out = await client().send(new ConverseStreamCommand({ modelId: 'm', messages: [{ role: 'user', content: [{ text: 'hi' }] }] }));
    const kinds: string[] = [];
    for await (const event of out.stream!) kinds.push(Object.keys(event).find((k) => (event as any)[k] !== undefined)!);
    expect(kinds).toEqual([
      'messageStart',
      'contentBlockDelta',
      'contentBlockDelta',
      'contentBlockDelta',
      'contentBlockStop',
      'messageStop',
      'metadata',
    ]);
  });

  it('refuses an unsigned request and one signed for another region', async () => {
    const unsigned = await fetch(`${fake.url}/model/m/converse`, { method: 'POST', body: '{}' });
    expect(unsigned.status).toBe(403);
    const other = client('eu-west-1');
    await expect(
      other.send(new ConverseCommand({ modelId: 'm', messages: [{ role: 'user', content: [{ text: 'hi' }] }] })),
    ).rejects.toMatchObject({
      name: 'UnrecognizedClientException',
      $metadata: { httpStatusCode: 403 },
    });
  });
});
