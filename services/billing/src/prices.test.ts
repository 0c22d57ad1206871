import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, openSqliteStore, type Store } from '@svc/kit';
import {} from '@svc/contracts';
import { callCredits } from '@svc/llm/pricing';
import type { eventsV1 } from '@svc/proto';
import { usageMessage } from '../test/fixtures/unit';
import { accounts, ALL_COLLECTIONS, ledger, reservations, type EntryDoc } from './collections';
import { billingEventHandler } from './events';
import { addEntry, applyOnce } from './ledger';
import { creditsOf, reserve, validReserve } from './reservations';
import { usageRollups, usageRows } from './usage-analytics';

const T = 'ten_prices';
const logger = createLogger('billing-test', 'silent');
let dir: string;
let store: Store;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'billing-prices-'));
  store = await openSqliteStore({ path: join(dir, 'billing.db') });
  for (const c of [...ALL_COLLECTIONS, usageRollups]) await store.ensure(c as Parameters<Store['ensure']>[0]);
  await applyOnce(store, (tx) =>
    addEntry(tx, { tenantId: T, sourceKey: `grant:${T}`, kind: 'grant', credits: 1_000_000, description: 'grant' }),
  );
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Three models, fifty times apart, and one priced by the platform list with a cheaper cache. */
const PRICES: Record<string, eventsV1.ModelPrice> = {
  small: { input: 150, output: 600, cachedInput: 150, source: 'entry' },
  strong: { input: 7500, output: 30000, cachedInput: 7500, source: 'entry' },
  listed: { input: 2500, output: 10000, cachedInput: 1250, source: 'platform' },
};

const usage = (callId: string, model: string, inputTokens: number, outputTokens: number, extra: Partial<eventsV1.UsageData> = {}) =>
  usageMessage(callId, inputTokens, T, { model, outputTokens, ...(PRICES[model] ? { price: PRICES[model] } : {}), ...extra });

const balance = async () => (await store.collection(accounts).get(T))!.balance;

it('debits each call at its model price, names the model, the entry and the price, and usage by model sums to the ledger', async () => {
  const handle = billingEventHandler(store, { creditsPer1kTokens: 1, startingGrant: 0 }, logger);
  const calls: Array<[string, number, number, number?]> = [];
  for (let i = 0; i < 30; i++)
    calls.push([['small', 'strong', 'listed'][i % 3], 100 + i * 37, 10 + i * 11, i % 3 === 2 ? 60 + i : undefined]);
  calls.push(['unpriced', 1500, 600]);
  for (const [i, [model, input, output, cached]] of calls.entries())
    await handle(
      usage(`call_${i}`, model, input, output, {
        ...(cached ? { cachedInputTokens: cached } : {}),
        call: {
          origin: 'chat',
          requestId: `req_${i}`,
          endUser: '',
          status: 'ok',
          errorCode: '',
          latencyMs: 5,
          ttftMs: 1,
          entryId: `mdl_${model}`,
          servedModel: `${model}-2025`,
          userId: '',
        },
      }),
    );

  const entries = (await store.collection(ledger).find({ tenantId: T }, { limit: 100 })).items.filter((e) => e.kind === 'usage');
  expect(entries).toHaveLength(calls.length);
  const byCall = new Map<string, EntryDoc>(entries.map((e) => [e.sourceKey, e]));
  for (const [i, [model, input, output, cached]] of calls.entries()) {
    const entry = byCall.get(`usage:call:call_${i}`)!;
    const price = PRICES[model];
    // The formula, worked by hand: ceil((uncached × input + output × output + cached × cachedInput) / 1e6).
    const expected = price
      ? Math.ceil(((input - (cached ?? 0)) * price.input + output * price.output + (cached ?? 0) * price.cachedInput) / 1e6)
      : Math.ceil((input + output) / 1000);
    expect(-entry.credits).toBe(expected);
    expect(entry.usage).toMatchObject({
      model,
      provider: 'openai',
      entryId: `mdl_${model}`,
      servedModel: `${model}-2025`,
      inputTokens: input,
      outputTokens: output,
      price: price
        ? { input: price.input, output: price.output, cachedInput: price.cachedInput, source: price.source }
        : { input: 1000, output: 1000, cachedInput: 1000, source: 'default' },
    });
    expect(entry.usage!.cachedInputTokens).toBe(cached);
    expect(entry.description).toContain(model);
  }
  // A strong call of the same size costs fifty times a small one.
  expect(callCredits({ inputTokens: 1e6, outputTokens: 0 }, PRICES.strong)).toBe(
    50 * callCredits({ inputTokens: 1e6, outputTokens: 0 }, PRICES.small),
  );

  const spent = entries.reduce((n, e) => n - e.credits, 0);
  expect(await balance()).toBe(1_000_000 - spent);
  const now = Date.now();
  const rows = await usageRows(store, T, { from: now - 3600_000, to: now + 3600_000, granularity: 'day', groupBy: ['model'] });
  expect(new Set(rows.map((r) => r.model))).toEqual(new Set(['small', 'strong', 'listed', 'unpriced']));
  expect(rows.reduce((n, r) => n + r.credits, 0)).toBe(spent);
  for (const model of ['small', 'strong', 'listed', 'unpriced'])
    expect(rows.filter((r) => r.model === model).reduce((n, r) => n + r.credits, 0)).toBe(
      entries.filter((e) => e.usage!.model === model).reduce((n, e) => n - e.credits, 0),
    );
});

it('holds a priced reservation at its bounds and that price, and a settle closes it at the call price', async () => {
  const input = { tenantId: T, callId: 'c1', tokens: 999_999, source: 'chat_reply', sourceId: 'c1', ttlMs: 60_000 };
  const { doc } = await reserve(store, { ...input, price: PRICES.strong, inputTokens: 2000, outputTokens: 1024 }, 1);
  // 2,000 × 7,500 + 1,024 × 30,000 = 45.72M micro-credits: 46 credits; `tokens` is ignored.
  expect(doc.credits).toBe(46);
  expect(creditsOf(await store.collection(accounts).get(T)).reserved).toBe(46);
  // Without a price: `tokens` at the default price, as before.
  expect((await reserve(store, { ...input, callId: 'c2', tokens: 2500 }, 1)).doc.credits).toBe(3);

  await billingEventHandler(store, { creditsPer1kTokens: 1, startingGrant: 0 }, logger)(usage('c1', 'strong', 1000, 100));
  expect((await store.collection(reservations).get(`${T}:c1`))!.status).toBe('settled');
  expect(creditsOf(await store.collection(accounts).get(T)).reserved).toBe(3);
  expect(await balance()).toBe(1_000_000 - 11); // 7.5M + 3M micro-credits

  // A price nobody could mean is refused (the handler answers 400 with it).
  expect(validReserve({ ...input, callId: 'c3', price: { ...PRICES.small, input: -1 }, inputTokens: 1, outputTokens: 1 })).toMatch(
    /^price/,
  );
  expect(validReserve({ ...input, callId: 'c3', price: PRICES.small, inputTokens: 1.5, outputTokens: 1 })).toMatch(/^inputTokens/);
});
