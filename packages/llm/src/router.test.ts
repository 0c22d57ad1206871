import { CircuitBreaker } from './breaker';
import { breakerKey, type ServedModel } from './fallback';
import { orderByWeight, routeByName, type RoutedEntry } from './router';
import { drain, startFakeOpenAI, type FakeProviderServer } from './testing';
import type { LlmSettings } from './types';

/** A seeded generator (mulberry32): the weight test gives the same draws on every run, so it cannot flake. */
function seeded(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const entry = (id: string, weight: number, settings: Partial<LlmSettings> = {}): RoutedEntry<string> => ({
  weight,
  settings: { provider: 'openai-compatible', baseUrl: `http://${id}.example/v1`, model: id, ...settings },
  meta: id,
});

describe('orderByWeight', () => {
  it('sends 1,000 calls with weights 3:1 within 5 points of 75/25', () => {
    const entries = [entry('big', 3), entry('small', 1)];
    for (const seed of [1, 2, 3, 42, 2026]) {
      const random = seeded(seed);
      let big = 0;
      for (let i = 0; i < 1000; i++) if (orderByWeight(entries, { scope: 't', random })[0].meta === 'big') big++;
      expect(Math.abs(big / 1000 - 0.75)).toBeLessThanOrEqual(0.05);
    }
  });

  it('gives an entry whose breaker is open no call (it goes last, where the chain skips it)', () => {
    const breaker = new CircuitBreaker({ failures: 1, windowMs: 60_000, cooldownMs: 60_000 });
    const entries = [entry('down', 1000), entry('up', 1)];
    breaker.failure(breakerKey('t', entries[0].settings));
    const random = seeded(7);
    for (let i = 0; i < 200; i++)
      expect(orderByWeight(entries, { scope: 't', breaker, random }).map((e) => e.meta)).toEqual(['up', 'down']);
    // Another tenant's circuits are its own.
    expect(orderByWeight(entries, { scope: 'other', breaker, random: () => 0.99 })[0].meta).toBe('down');
  });

  it('keeps every entry once', () => {
    const entries = [entry('a', 1), entry('b', 5), entry('c', 10)];
    const ordered = orderByWeight(entries, { scope: 't', random: seeded(3) });
    expect(ordered.map((e) => e.meta).sort()).toEqual(['a', 'b', 'c']);
  });
});

describe('routeByName on real HTTP servers', () => {
  let first: FakeProviderServer;
  let sibling: FakeProviderServer;
  let fallback: FakeProviderServer;
  beforeAll(async () => {
    [first, sibling, fallback] = await Promise.all([startFakeOpenAI(), startFakeOpenAI(), startFakeOpenAI()]);
  });
  afterEach(() => {
    first.reset();
    sibling.reset();
    fallback.reset();
  });
  afterAll(async () => {
    await Promise.all([first.close(), sibling.close(), fallback.close()]);
  });

  const chats = (fake: FakeProviderServer) => fake.requests.filter((r) => r.path.endsWith('/chat/completions')).length;
  const ask = { messages: [{ role: 'user' as const, content: 'hello' }] };
  const entries = (): Array<RoutedEntry<string>> => [
    { weight: 1000, settings: { provider: 'openai-compatible', baseUrl: first.url, model: 'up-1' }, meta: 'ent_first' },
    { weight: 1, settings: { provider: 'openai-compatible', baseUrl: sibling.url, model: 'up-2' }, meta: 'ent_sibling' },
  ];
  const fallbacks = (): LlmSettings[] => [{ provider: 'openai-compatible', baseUrl: fallback.url, model: 'fb' }];

  it('moves a call that fails before its first token to a sibling entry before the fallbacks', async () => {
    first.script({ type: 'error', status: 503 });
    // The first entry is drawn first (random 0.99 with weight 1000 against 1).
    const routed = routeByName(entries(), fallbacks(), { scope: 't', random: () => 0.99, maxRetries: 0 }, { timeoutMs: 2000 });
    const served: ServedModel[] = [];
    const out = await drain(routed.chain.stream(ask, { onServed: (s) => served.push(s) }));
    expect(out.error).toBeUndefined();
    expect(out.text).toBe('Echo: hello');
    expect(served).toEqual([{ provider: 'openai-compatible', model: 'up-2', index: 1 }]);
    expect(routed.metaAt(served[0].index)).toBe('ent_sibling');
    expect([chats(first), chats(sibling), chats(fallback)]).toEqual([1, 1, 0]);
  });

  it('reaches the fallbacks when every entry of the name fails, and tells a fallback from an entry', async () => {
    first.script({ type: 'error', status: 503 });
    sibling.script({ type: 'error', status: 500 });
    const routed = routeByName(entries(), fallbacks(), { scope: 't', random: () => 0.5, maxRetries: 0 }, { timeoutMs: 2000 });
    const served: ServedModel[] = [];
    const out = await drain(routed.chain.stream(ask, { onServed: (s) => served.push(s) }));
    expect(out.text).toBe('Echo: hello');
    expect(served[0].index).toBe(2);
    expect(routed.metaAt(2)).toBeNull();
    expect([chats(first), chats(sibling), chats(fallback)]).toEqual([1, 1, 1]);
  });

  it('sends nothing to an entry whose breaker is open', async () => {
    const breaker = new CircuitBreaker({ failures: 1, windowMs: 60_000, cooldownMs: 60_000 });
    first.script({ type: 'error', status: 503 });
    const opts = { scope: 't', breaker, random: () => 0.99, maxRetries: 0 };
    await drain(routeByName(entries(), fallbacks(), opts, { timeoutMs: 2000 }).chain.stream(ask));
    expect(chats(first)).toBe(1);
    for (let i = 0; i < 20; i++) {
      const routed = routeByName(entries(), fallbacks(), opts, { timeoutMs: 2000 });
      const served: ServedModel[] = [];
      await drain(routed.chain.stream(ask, { onServed: (s) => served.push(s) }));
      expect(routed.metaAt(served[0].index)).toBe('ent_sibling');
    }
    expect([chats(first), chats(sibling), chats(fallback)]).toEqual([1, 21, 0]);
  });
});
