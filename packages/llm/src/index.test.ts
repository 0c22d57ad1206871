import { backoffMs, classifyHttpFailure, kindForStatus, retryAfterMs } from './core';
import {
  breakerKey,
  collect,
  createProvider,
  LlmError,
  llmCandidatesFrom,
  llmSettingsFrom,
  redact,
  type LlmEvent,
  type LlmSettings,
} from './index';

function headers(values: Record<string, string>) {
  return new Headers(values);
}

async function* events(list: LlmEvent[]): AsyncGenerator<LlmEvent> {
  for (const event of list) yield event;
}

describe('createProvider', () => {
  const bad = (settings: LlmSettings) => {
    try {
      createProvider(settings);
    } catch (err) {
      return err;
    }
    throw new Error('expected createProvider to throw');
  };

  it('checks settings at construction with bad_request errors', () => {
    const cases: LlmSettings[] = [
      { provider: 'openai' },
      { provider: 'anthropic', baseUrl: 'http://127.0.0.1:1' },
      { provider: 'openai-compatible' },
      { provider: 'openai-compatible', baseUrl: 'ftp://example.com/v1' },
      { provider: 'openai-compatible', baseUrl: 'not a url' },
      { provider: 'openai-compatible', baseUrl: 'http://user:pw@example.com/v1' },
      { provider: 'openai', apiKey: 'sk-x', timeoutMs: 0 },
      { provider: 'openai', apiKey: 'sk-x', maxRetries: -1 },
      { provider: 'mistral' as never, apiKey: 'k' },
      { provider: 'azure-openai', apiKey: 'k' },
      { provider: 'azure-openai', baseUrl: 'https://r.openai.azure.com' },
      { provider: 'gemini' },
      { provider: 'bedrock', apiKey: 'AKIA:secret' },
      { provider: 'bedrock', region: 'us-east-1' },
      { provider: 'bedrock', region: 'Not A Region', apiKey: 'AKIA:secret' },
      { provider: 'bedrock', region: 'us-east-1', apiKey: 'AKIA:' },
    ];
    for (const settings of cases) {
      const err = bad(settings);
      expect(err).toBeInstanceOf(LlmError);
      expect((err as LlmError).kind).toBe('bad_request');
    }
  });

  it('needs a model on the request or in the settings', async () => {
    const provider = createProvider({ provider: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1' });
    await expect(collect(provider.stream({ messages: [{ role: 'user', content: 'x' }] }))).rejects.toMatchObject({ kind: 'bad_request' });
  });

  it('refuses a tool message without toolCallId', async () => {
    const provider = createProvider({ provider: 'anthropic', apiKey: 'k', model: 'm', baseUrl: 'http://127.0.0.1:9' });
    const request = { messages: [{ role: 'tool' as const, content: 'r' }] };
    await expect(collect(provider.stream(request))).rejects.toMatchObject({ kind: 'bad_request' });
  });
});

describe('breakerKey', () => {
  it('tells Bedrock deployments apart by region, and keeps the other keys as they were', () => {
    expect(breakerKey('t', { provider: 'openai', model: 'm', baseUrl: 'https://x/v1/' })).toBe('t|openai|m|https://x/v1');
    expect(breakerKey('t', { provider: 'bedrock', model: 'm', region: 'us-east-1' })).not.toBe(
      breakerKey('t', { provider: 'bedrock', model: 'm', region: 'eu-west-1' }),
    );
  });
});

describe('collect', () => {
  it('joins text, gathers tool calls and usage, and requires a finish', async () => {
    const reply = await collect(
      events([
        { type: 'text', delta: 'a' },
        { type: 'text', delta: 'b' },
        { type: 'tool_call', id: '1', name: 'f', arguments: { x: 1 } },
        { type: 'usage', inputTokens: 3, outputTokens: 4 },
        { type: 'finish', reason: 'tool_calls' },
      ]),
    );
    expect(reply).toEqual({
      text: 'ab',
      toolCalls: [{ id: '1', name: 'f', arguments: { x: 1 } }],
      usage: { inputTokens: 3, outputTokens: 4 },
      finishReason: 'tool_calls',
    });
    await expect(collect(events([{ type: 'text', delta: 'a' }]))).rejects.toMatchObject({ kind: 'protocol' });
  });
});

describe('error helpers', () => {
  it('redacts the key, key-shaped tokens and bearer tokens', () => {
    const key = 'my-very-secret-key-123';
    expect(redact(`bad key ${key}!`, [key])).toBe('bad key [redacted]!');
    expect(redact('Incorrect API key provided: sk-proj-********abcd.', [])).not.toContain('sk-proj');
    expect(redact('Authorization: Bearer abc.def.ghi', [])).toBe('Authorization: Bearer [redacted]');
  });

  it('maps statuses to kinds', () => {
    expect([400, 401, 403, 404, 408, 409, 413, 422, 429, 500, 503, 529].map(kindForStatus)).toEqual([
      'bad_request',
      'auth',
      'auth',
      'bad_request',
      'timeout',
      'unavailable',
      'bad_request',
      'bad_request',
      'rate_limited',
      'unavailable',
      'unavailable',
      'unavailable',
    ]);
  });

  it('reads retry-after-ms, retry-after seconds and HTTP dates', () => {
    expect(retryAfterMs(headers({ 'retry-after-ms': '250' }))).toBe(250);
    expect(retryAfterMs(headers({ 'retry-after': '2' }))).toBe(2000);
    expect(retryAfterMs(headers({ 'retry-after': '0' }))).toBe(0);
    const now = Date.parse('2030-01-01T00:00:00Z');
    expect(retryAfterMs(headers({ 'retry-after': 'Tue, 01 Jan 2030 00:00:05 GMT' }), now)).toBe(5000);
    expect(retryAfterMs(headers({ 'retry-after': 'soon' }))).toBeUndefined();
    expect(retryAfterMs(headers({}))).toBeUndefined();
  });

  it('backs off exponentially up to a cap, with jitter below the nominal delay', () => {
    expect(backoffMs(0, () => 0)).toBe(500);
    expect(backoffMs(1, () => 0)).toBe(1000);
    expect(backoffMs(2, () => 0)).toBe(2000);
    expect(backoffMs(10, () => 0)).toBe(8000);
    expect(backoffMs(0, () => 1)).toBe(375);
  });

  it('follows x-should-retry over the status', () => {
    expect(classifyHttpFailure('openai', { status: 500, headers: headers({ 'x-should-retry': 'false' }) }, []).retry).toBe(false);
    expect(classifyHttpFailure('openai', { status: 400, headers: headers({ 'x-should-retry': 'true' }) }, []).retry).toBe(true);
    expect(classifyHttpFailure('openai', { status: 401 }, []).retry).toBe(false);
    expect(classifyHttpFailure('openai', { status: 429 }, []).retry).toBe(true);
  });
});

describe('llmSettingsFrom with the new providers', () => {
  it("passes Azure's apiVersion and Bedrock's region on, to the fallbacks too", () => {
    const stored = {
      provider: 'azure-openai',
      model: 'gpt-4o-prod',
      baseUrl: 'https://r.openai.azure.com',
      apiKey: 'k',
      apiVersion: '2025-01-01-preview',
      region: '',
      fallbacks: [{ provider: 'bedrock', model: 'anthropic.claude', baseUrl: '', apiKey: 'AKIA:s', region: 'eu-west-1' }],
    };
    const [main, fallback] = llmCandidatesFrom(stored);
    expect(main).toMatchObject({ provider: 'azure-openai', apiVersion: '2025-01-01-preview', region: undefined });
    expect(fallback).toMatchObject({ provider: 'bedrock', region: 'eu-west-1', apiVersion: undefined, baseUrl: undefined });
  });
});

describe('llmSettingsFrom', () => {
  it('leaves out what identity stores as empty strings, keeps the rest', () => {
    expect(llmSettingsFrom({ provider: 'openai-compatible', model: 'llama3.1', baseUrl: 'http://127.0.0.1:11434/v1', apiKey: '' })).toEqual(
      {
        provider: 'openai-compatible',
        model: 'llama3.1',
        baseUrl: 'http://127.0.0.1:11434/v1',
        apiKey: undefined,
        temperature: undefined,
        maxTokens: undefined,
      },
    );
    expect(llmSettingsFrom({ provider: 'anthropic', model: '', baseUrl: '', apiKey: 'sk-ant', temperature: 0.2, maxTokens: 512 })).toEqual({
      provider: 'anthropic',
      model: undefined,
      baseUrl: undefined,
      apiKey: 'sk-ant',
      temperature: 0.2,
      maxTokens: 512,
    });
  });
});
