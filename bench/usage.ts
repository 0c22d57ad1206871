/**
 * `npm run bench:usage`: usage analytics (`GET /billing/usage`) over a large ledger.
 *
 * BENCH_USAGE_ENTRIES (default 1,000,000) usage entries of one tenant, spread over a 30-day month and over 4 models,
 * 5 API keys, 3 projects and 4 agents, written to billing's SQLite store in a temp dir as billing writes them: the
 * ledger entry and its hour and day rollups (usage-analytics.ts recordUsageRollups) in one transaction (batched
 * 2,000 entries a transaction here, to fill the store in reasonable time). The entries get their times from the
 * bench rather than the clock, to cover a month. Timed: the month by day and by model, as the route runs it
 * (usageRows), the median of 11 runs; beside it, the baseline: a plain count of the tenant's ledger entries on the
 * same store (an indexed count, no documents read). Checked: the query's credits equal the sum written.
 * Results go to bench/results/usage.json.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { openSqliteStore, type Store } from '@svc/kit';
import { ALL_COLLECTIONS, ledger, type EntryDoc } from '../services/billing/src/collections';
import { parseUsageQuery, recordUsageRollups, usageRollups, usageRows } from '../services/billing/src/usage-analytics';
import { ROOT, runBench } from './lib';

const ENTRIES = Number(process.env.BENCH_USAGE_ENTRIES ?? 1_000_000);
const BATCH = 2_000;
const RUNS = 11;
const RESULTS = resolve(ROOT, 'bench/results/usage.json');
const TENANT = 'ten_bench';
const MONTH = Date.parse('2025-06-01T00:00:00.000Z');
const MONTH_MS = 30 * 24 * 3600_000;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const round = (ms: number) => Math.round(ms * 100) / 100;

async function timed<R>(fn: () => Promise<R>): Promise<{ ms: number; result: R }> {
  const start = process.hrtime.bigint();
  const result = await fn();
  return { ms: Number(process.hrtime.bigint() - start) / 1e6, result };
}

async function fill(store: Store): Promise<number> {
  let credits = 0;
  const started = Date.now();
  for (let i = 0; i < ENTRIES; i += BATCH) {
    await store.transaction(async (tx) => {
      for (let j = i; j < Math.min(ENTRIES, i + BATCH); j++) {
        const createdAt = new Date(MONTH + Math.floor((j / ENTRIES) * MONTH_MS)).toISOString();
        const entry: EntryDoc = {
          id: `cre_b${j}`,
          tenantId: TENANT,
          sourceKey: `usage:call:bench-${j}`,
          kind: 'usage',
          credits: -(1 + (j % 3)),
          description: 'bench',
          createdAt,
          hour: `${createdAt.slice(0, 13)}:00:00.000Z`,
          usage: {
            model: `openai/model-${j % 4}`,
            apiKeyId: `key_bench${j % 5}`,
            projectId: `prj_bench${j % 3}`,
            agentId: `agt_bench${j % 7 < 4 ? j % 7 : 0}`,
            inputTokens: 500 + (j % 100),
            outputTokens: 200 + (j % 50),
          },
        };
        credits -= entry.credits;
        await tx.collection(ledger).insert(entry);
        await recordUsageRollups(tx, entry);
      }
    });
    if ((i / BATCH) % 50 === 0) console.log(`  ${i + BATCH} entries written (${Math.round((Date.now() - started) / 1000)} s)`);
  }
  return credits;
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-usage-'));
  const store = await openSqliteStore({ path: join(dir, 'billing.db') });
  try {
    for (const c of [...ALL_COLLECTIONS, usageRollups]) await store.ensure(c as Parameters<Store['ensure']>[0]);
    console.log(`usage analytics: writing ${ENTRIES} ledger entries with their rollups`);
    const fillStart = Date.now();
    const written = await fill(store);
    const fillS = (Date.now() - fillStart) / 1000;
    const q = parseUsageQuery({
      from: new Date(MONTH).toISOString(),
      to: new Date(MONTH + MONTH_MS).toISOString(),
      granularity: 'day',
      groupBy: ['model'],
    });
    const query: number[] = [];
    const count: number[] = [];
    let rows = 0;
    for (let r = 0; r < RUNS; r++) {
      const got = await timed(() => usageRows(store, TENANT, q));
      query.push(got.ms);
      rows = got.result.length;
      const sum = got.result.reduce((n, row) => n + Number(row.credits), 0);
      if (sum !== written) throw new Error(`the query's credits ${sum} differ from the ${written} written`);
      const counted = await timed(() => store.collection(ledger).count({ tenantId: TENANT }));
      if (counted.result !== ENTRIES) throw new Error(`counted ${counted.result} entries, wrote ${ENTRIES}`);
      count.push(counted.ms);
    }
    const result = {
      entries: ENTRIES,
      fillSeconds: Math.round(fillS),
      monthByDayAndModel: { rows, medianMs: round(median(query)), maxMs: round(Math.max(...query)) },
      baselineLedgerCount: { medianMs: round(median(count)), maxMs: round(Math.max(...count)) },
      targetMs: 200,
    };
    console.log(JSON.stringify(result, null, 2));
    writeFileSync(RESULTS, `${JSON.stringify(result, null, 2)}\n`);
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

runBench(main);
