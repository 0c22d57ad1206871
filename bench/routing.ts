/**
 * `npm run bench:routing`: what routing a call by catalogue name and pricing it add to a model call (issue 31: under
 * 50 µs per call). Not run in CI.
 *
 * 1. The added work alone, in a loop: a name's three entries planned (identity resolved their prices; and again with
 *    the platform price list looked up here), spread by weight over the breaker, held (planHold), and the call's
 *    credits from its usage (callCredits); per call, p50 over batches of 1,000.
 * 2. Beside the call without them: calls streamed from a local fake OpenAI server, alternating (A B B A) between a
 *    model chain on the settings alone and the same call routed by name over three entries and priced; the difference
 *    of the medians (HTTP's own noise, ~±100 µs here, is larger than what is measured: 1. is the measure).
 * Results go to bench/results/routing.json.
 */
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import {
  callCredits,
  CircuitBreaker,
  createModelChain,
  planCall,
  planHold,
  routePlan,
  type LlmSettings,
  type ResolvedCatalogueEntry,
} from '@svc/llm';
import { drain, startFakeOpenAI } from '@svc/llm/testing';
import { ROOT, runBench } from './lib';

const CALLS = Number(process.env.BENCH_ROUTING_CALLS ?? 2_000);
const LOOPS = Number(process.env.BENCH_ROUTING_LOOPS ?? 200_000);
const RESULTS = resolve(ROOT, 'bench/results/routing.json');
const pricing = { creditsPerUsd: 1000, creditsPer1kTokens: 1 };
const usage = { inputTokens: 812, outputTokens: 230, cachedInputTokens: 128 };

const percentile = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) * p)];
const round = (us: number) => Math.round(us * 100) / 100;

function entries(baseUrl: string, priced: boolean): ResolvedCatalogueEntry[] {
  const models = ['gpt-4o-mini', 'gpt-4o', 'gpt-4.1-mini'];
  return models.map((upstreamModel, i) => ({
    id: `mdl_${i}`,
    name: 'fast',
    provider: 'openai',
    upstreamModel,
    baseUrl,
    apiKey: 'sk-bench',
    apiVersion: '',
    region: '',
    weight: [3, 1, 1][i],
    ...(priced ? { price: { input: 150 + i, output: 600 + i, cachedInput: 75, source: 'platform' } } : {}),
  }));
}

/** Microseconds per call of plan, route, hold and credits, p50 over batches of 1,000 calls. */
function addedWork(list: ResolvedCatalogueEntry[], defaults: LlmSettings[], breaker: CircuitBreaker): number {
  const batches: number[] = [];
  let sink = 0;
  for (let b = 0; b < LOOPS / 1000; b++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < 1000; i++) {
      const plan = planCall('fast', list, defaults, pricing);
      const routed = routePlan(plan, { breaker, scope: 'ten_bench' });
      sink += planHold(plan).outputTokens + callCredits(usage, routed.metaOf(0).price);
    }
    batches.push(Number(process.hrtime.bigint() - t0) / 1e3 / 1000);
  }
  if (sink < 0) console.log(sink);
  return round(percentile(batches, 0.5));
}

async function main(): Promise<void> {
  const breaker = new CircuitBreaker({ failures: 5, windowMs: 60_000, cooldownMs: 30_000 });
  const defaults: LlmSettings[] = [
    { provider: 'openai', model: 'gpt-4o-mini', apiKey: 'sk-bench' },
    { provider: 'anthropic', model: 'claude-3-5-haiku-latest', apiKey: 'sk-bench' },
  ];
  const priced = addedWork(entries('', true), defaults, breaker);
  const listed = addedWork(entries('', false), defaults, breaker);

  const fake = await startFakeOpenAI();
  try {
    const settings: LlmSettings = { provider: 'openai', baseUrl: fake.url, apiKey: 'sk-bench', model: 'gpt-4o-mini' };
    const list = entries(fake.url, true);
    const bare: number[] = [];
    const routed: number[] = [];
    const request = { messages: [{ role: 'user' as const, content: 'benchmark this call' }] };
    for (let i = 0; i < CALLS; i++) {
      // A B B A ...: each kind of call comes first as often as second (the call after another is slower or faster).
      const plain = i % 2 === Math.floor(i / 2) % 2;
      const t0 = process.hrtime.bigint();
      if (plain) {
        await drain(createModelChain([settings], { breaker, scope: 'ten_bench' }).stream(request));
      } else {
        const plan = planCall('fast', list, [settings], pricing);
        const r = routePlan(plan, { breaker, scope: 'ten_bench' });
        planHold(plan);
        let served = 0;
        const out = await drain(r.chain.stream(request, { onServed: (s) => (served = s.index) }));
        const reported = out.events.find((e) => e.type === 'usage');
        callCredits(reported?.type === 'usage' ? reported : usage, r.metaOf(served).price);
      }
      (plain ? bare : routed).push(Number(process.hrtime.bigint() - t0) / 1e3);
    }
    const result = {
      addedWorkUs: { entryPrices: priced, platformListPrices: listed },
      call: {
        calls: CALLS,
        withoutP50Us: round(percentile(bare, 0.5)),
        routedAndPricedP50Us: round(percentile(routed, 0.5)),
        addedP50Us: round(percentile(routed, 0.5) - percentile(bare, 0.5)),
      },
      targetUs: 50,
    };
    console.log(JSON.stringify(result, null, 2));
    writeFileSync(RESULTS, `${JSON.stringify(result, null, 2)}\n`);
  } finally {
    await fake.close();
  }
}

runBench(main);
