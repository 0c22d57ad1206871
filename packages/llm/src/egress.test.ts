import { egressFetch } from '@svc/kit';
import { createProvider, LlmError, throughEgress } from './index';
import { drain, echoText, startFakeAnthropic, startFakeOpenAI, type FakeProviderServer } from './testing';

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
    const fetch = throughEgress(egressFetch({ allowPrivate: true }));
    const { text, error } = await drain(
      createProvider({ provider: 'openai-compatible', baseUrl: openai.url, model: 'm', fetch }).stream(ask),
    );
    expect(error).toBeUndefined();
    expect(text).toBe(echoText('hello guard'));
    const viaAnthropic = await drain(
      createProvider({ provider: 'anthropic', baseUrl: anthropic.url, apiKey: 'k-anthropic-123', model: 'm', fetch }).stream(ask),
    );
    expect(viaAnthropic.text).toBe(echoText('hello guard'));
  });

  it('refuses a loopback provider when private egress is not allowed, as a bad_request that is not retried', async () => {
    const before = openai.requests.length;
    const fetch = throughEgress(egressFetch({ allowPrivate: false }));
    const { error } = await drain(createProvider({ provider: 'openai-compatible', baseUrl: openai.url, model: 'm', fetch }).stream(ask));
    expect(error).toBeInstanceOf(LlmError);
    expect((error as LlmError).kind).toBe('bad_request');
    expect((error as LlmError).code).toBe('egress_address');
    expect(openai.requests.length).toBe(before);
  });
});
