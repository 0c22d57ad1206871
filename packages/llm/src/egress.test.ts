import { egressStream } from '@svc/kit';
import { createProvider, LlmError, throughEgress, type LlmSettings } from './index';
import {
  drain,
  echoText,
  startFakeAnthropic,
  startFakeAzureOpenAI,
  startFakeBedrock,
  startFakeGemini,
  startFakeOpenAI,
  type FakeProviderServer,
} from './testing';

describe('providers behind the egress guard', () => {
  let openai: FakeProviderServer;
  let anthropic: FakeProviderServer;
  const ask = { messages: [{ role: 'user' as const, content: 'hello guard' }] };

  beforeAll(async () => {
    openai = await startFakeOpenAI();
    anthropic = await startFakeAnthropic();
  });
  afterAll(async () => {
    await openai.close();
    await anthropic.close();
  });

  it('reaches a loopback provider when private egress is allowed', async () => {
    const transport = throughEgress(egressStream({ allowPrivate: true }));
    const { text, error } = await drain(
      createProvider({ provider: 'openai-compatible', baseUrl: openai.url, model: 'm', transport }).stream(ask),
    );
    expect(error).toBeUndefined();
    expect(text).toBe(echoText('hello guard'));
    const viaAnthropic = await drain(
      createProvider({ provider: 'anthropic', baseUrl: anthropic.url, apiKey: 'k-anthropic-123', model: 'm', transport }).stream(ask),
    );
    expect(viaAnthropic.text).toBe(echoText('hello guard'));
  });

  it('refuses a loopback provider when private egress is not allowed, as a bad_request that is not retried', async () => {
    const before = openai.requests.length;
    const transport = throughEgress(egressStream({ allowPrivate: false }));
    const { error } = await drain(
      createProvider({ provider: 'openai-compatible', baseUrl: openai.url, model: 'm', transport }).stream(ask),
    );
    expect(error).toBeInstanceOf(LlmError);
    expect((error as LlmError).kind).toBe('bad_request');
    expect((error as LlmError).code).toBe('egress_address');
    expect(openai.requests.length).toBe(before);
  });

  describe.each([
    ['azure-openai', () => startFakeAzureOpenAI(), { apiKey: 'azure-key-123' }],
    ['gemini', () => startFakeGemini(), { apiKey: 'gemini-key-123' }],
    ['bedrock', () => startFakeBedrock({ region: 'us-east-1' }), { apiKey: 'AKIAFAKE:secret', region: 'us-east-1' }],
  ] as const)('%s behind the guard', (provider, start, extra) => {
    let fake: FakeProviderServer;
    beforeAll(async () => {
      fake = await start();
    });
    afterAll(() => fake.close());
    const settings = (allowPrivate: boolean): LlmSettings => ({
      provider,
      baseUrl: fake.url,
      model: 'm',
      ...extra,
      transport: throughEgress(egressStream({ allowPrivate })),
    });

    it('reaches the loopback fake when private egress is allowed, and is refused (no request) when not', async () => {
      const { text, error } = await drain(createProvider(settings(true)).stream(ask));
      expect(error).toBeUndefined();
      expect(text).toBe(echoText('hello guard'));
      const before = fake.requests.length;
      const refused = await drain(createProvider(settings(false)).stream(ask));
      expect(refused.error).toBeInstanceOf(LlmError);
      expect((refused.error as LlmError).code).toBe('egress_address');
      expect(fake.requests.length).toBe(before);
    });
  });
});
