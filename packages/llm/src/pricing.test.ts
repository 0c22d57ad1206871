import { callCredits, defaultPrice, platformPrice, resolvePrice } from './pricing';

const settings = { creditsPerUsd: 1000, creditsPer1kTokens: 1 };

describe('resolvePrice', () => {
  it("takes the entry's own price, cached input defaulting to input", () => {
    expect(resolvePrice({ provider: 'openai', upstreamModel: 'gpt-4o-mini', price: { input: 7, output: 9 } }, settings)).toEqual({
      input: 7,
      output: 9,
      cachedInput: 7,
      source: 'entry',
    });
  });

  it("takes the platform list's price in USD times CREDITS_PER_USD", () => {
    const price = resolvePrice({ provider: 'openai', upstreamModel: 'gpt-4o-mini' }, settings);
    expect(price.source).toBe('platform');
    // gpt-4o-mini is listed at $0.15 / $0.60 per million tokens, cached input $0.075.
    expect(price.input).toBeCloseTo(150);
    expect(price.output).toBeCloseTo(600);
    expect(price.cachedInput).toBeCloseTo(75);
    expect(resolvePrice({ provider: 'openai', upstreamModel: 'gpt-4o-mini' }, { ...settings, creditsPerUsd: 10 }).input).toBeCloseTo(1.5);
  });

  it('maps each provider kind to the list, long-context tiers at their base', () => {
    expect(platformPrice('anthropic', 'claude-sonnet-4-5', undefined, 1000)?.input).toBeCloseTo(3000);
    expect(platformPrice('gemini', 'gemini-2.5-flash', undefined, 1000)?.output).toBeCloseTo(2500);
    expect(platformPrice('bedrock', 'anthropic.claude-3-5-sonnet-20240620-v1:0', undefined, 1000)?.output).toBeCloseTo(15000);
    expect(platformPrice('azure-openai', 'gpt-4o', undefined, 1000)?.input).toBeCloseTo(2500);
  });

  it('falls back to CREDITS_PER_1K_TOKENS for a model the list does not know', () => {
    expect(
      resolvePrice({ provider: 'openai-compatible', upstreamModel: 'llama3.1', baseUrl: 'http://127.0.0.1:11434/v1' }, settings),
    ).toEqual(defaultPrice(settings));
    expect(resolvePrice({ provider: 'openai', upstreamModel: 'no-such-model-xyz' }, { ...settings, creditsPer1kTokens: 2 })).toEqual({
      input: 2000,
      output: 2000,
      cachedInput: 2000,
      source: 'default',
    });
  });
});

describe('callCredits', () => {
  it('is ceil((uncached × input + output × output + cached × cachedInput) / 1,000,000)', () => {
    const price = { input: 150, output: 600, cachedInput: 75 };
    expect(callCredits({ inputTokens: 10_000, outputTokens: 1_000 }, price)).toBe(Math.ceil((10_000 * 150 + 1_000 * 600) / 1e6));
    expect(callCredits({ inputTokens: 10_000, outputTokens: 1_000, cachedInputTokens: 4_000 }, price)).toBe(
      Math.ceil((6_000 * 150 + 1_000 * 600 + 4_000 * 75) / 1e6),
    );
  });

  it('rounds a small call up to one credit, and a free model to none', () => {
    expect(callCredits({ inputTokens: 3, outputTokens: 0 }, { input: 0.1, output: 0, cachedInput: 0 })).toBe(1);
    expect(callCredits({ inputTokens: 500, outputTokens: 500 }, { input: 0, output: 0, cachedInput: 0 })).toBe(0);
  });

  it('does not round a whole number of credits up past itself', () => {
    // 3 × 0.1 is 0.30000000000000004 in floating point.
    expect(callCredits({ inputTokens: 10_000_000, outputTokens: 0 }, { input: 0.3, output: 0, cachedInput: 0 })).toBe(3);
    expect(callCredits({ inputTokens: 1000, outputTokens: 1000 }, defaultPrice({ creditsPer1kTokens: 1 }))).toBe(2);
  });

  it('never counts more cached tokens than input tokens', () => {
    expect(callCredits({ inputTokens: 100, outputTokens: 0, cachedInputTokens: 1e9 }, { input: 1e6, output: 0, cachedInput: 0 })).toBe(0);
  });
});
