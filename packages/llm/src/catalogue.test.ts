import { boundPlan, catalogueCandidate, planCall, planHold, type ResolvedCatalogueEntry } from './catalogue';

const pricing = { creditsPerUsd: 1000, creditsPer1kTokens: 2 };
const entry = (id: string, fields: Partial<ResolvedCatalogueEntry> = {}): ResolvedCatalogueEntry => ({
  id,
  name: 'fast',
  provider: 'openai-compatible',
  upstreamModel: `up-${id}`,
  baseUrl: 'http://models.example/v1',
  apiKey: '',
  apiVersion: '',
  region: '',
  weight: 1,
  ...fields,
});

it('plans a catalogue name as its entries then the default model’s fallbacks; without entries, the default model', () => {
  const defaults = [
    { provider: 'openai' as const, model: 'main' },
    { provider: 'anthropic' as const, model: 'backup' },
  ];
  const named = planCall('fast', [entry('a'), entry('b')], defaults, pricing);
  expect(named.primary.map((c) => [c.settings.model, c.meta.entryId])).toEqual([
    ['up-a', 'a'],
    ['up-b', 'b'],
  ]);
  expect(named.fallbacks.map((c) => [c.settings.model, c.meta.entryId])).toEqual([['backup', '']]);
  const plain = planCall('main', [], defaults, pricing);
  expect(plain.primary.map((c) => c.settings.model)).toEqual(['main']);
  expect(plain.fallbacks.map((c) => c.settings.model)).toEqual(['backup']);
  expect(planCall('fast', [entry('a')], [], pricing).fallbacks).toEqual([]);
});

it("takes an entry's price as identity resolved it, else resolves it (unknown model: the default price)", () => {
  const priced = catalogueCandidate(entry('a', { price: { input: 10, output: 20, cachedInput: 5, source: 'entry' } }), pricing);
  expect(priced.meta.price).toEqual({ input: 10, output: 20, cachedInput: 5, source: 'entry' });
  expect(catalogueCandidate(entry('b'), pricing).meta.price).toEqual({ input: 2000, output: 2000, cachedInput: 2000, source: 'default' });
});

it('bounds each deployment (an entry keeps its own bound unless the caller asked for less) and holds the dearest price', () => {
  const plan = planCall(
    'fast',
    [
      entry('cheap', { price: { input: 100, output: 400, cachedInput: 50, source: 'entry' }, maxOutputTokens: 300 }),
      entry('dear', { price: { input: 3000, output: 15000, cachedInput: 300, source: 'entry' } }),
    ],
    [
      { provider: 'openai', model: 'main' },
      { provider: 'openai-compatible', baseUrl: 'http://backup.example/v1', model: 'backup' },
    ],
    pricing,
  );
  const bounded = boundPlan(plan, { maxTokens: 1024, temperature: 0.2 });
  expect(bounded.primary.map((c) => c.settings.maxTokens)).toEqual([300, 1024]);
  expect(bounded.fallbacks[0].settings).toMatchObject({ maxTokens: 1024, temperature: 0.2 });
  expect(boundPlan(plan, { maxTokens: 100, callerBound: true }).primary.map((c) => c.settings.maxTokens)).toEqual([100, 100]);
  expect(planHold(bounded)).toEqual({
    price: { input: 3000, output: 15000, cachedInput: 2000, source: 'entry' },
    outputTokens: 1024,
  });
});
