/**
 * `npm run bench:request-log`: what the request log's write adds to settling a model call (issue 31: under 0.2 ms
 * p50).
 *
 * Billing's SQLite store in a temp dir, its request log first filled with BENCH_REQUEST_LOG_ENTRIES (default 100,000)
 * entries over 50 tenants (its six indexes are not trivially small). Then SETTLES calls are settled with billing's
 * own `applyUsage` (the ledger entry, the reservation, rollups, key usage, and the log entry in one transaction),
 * alternating, call by call, between the store as it is and the same store whose request-log insert does nothing:
 * the difference of the two medians is what the log's write adds. Results go to bench/results/request-log.json.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { openSqliteStore, type CollectionDef, type Store, type StoreSession } from '@svc/kit';
import type { eventsV1 } from '@svc/proto';
import { ALL_COLLECTIONS } from '../services/billing/src/collections';
import { applyUsage, grantStartingCredits } from '../services/billing/src/events';
import { requestLog, type RequestLogDoc } from '../services/billing/src/request-log';
import { usageRollups } from '../services/billing/src/usage-analytics';
import { ROOT, runBench } from './lib';

const ENTRIES = Number(process.env.BENCH_REQUEST_LOG_ENTRIES ?? 100_000);
const SETTLES = Number(process.env.BENCH_REQUEST_LOG_SETTLES ?? 4_000);
const RESULTS = resolve(ROOT, 'bench/results/request-log.json');
const TENANT = 'ten_bench';

const percentile = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) * p)];
const us = (ms: number) => Math.round(ms * 1000);

/** The same store, except that inserts into the request log do nothing (the settle without the log's write). */
function withoutLog(store: Store): Store {
  const session = (tx: StoreSession): StoreSession => ({
    collection<T extends { id: string }>(def: CollectionDef<T>) {
      const col = tx.collection(def);
      if (def.name !== requestLog.name) return col;
      return new Proxy(col, { get: (target, p, r) => (p === 'insert' ? async (doc: T) => doc : Reflect.get(target, p, r)) });
    },
  });
  return new Proxy(store, {
    get: (target, p, r) =>
      p === 'transaction'
        ? <R>(fn: (tx: StoreSession) => Promise<R>) => target.transaction((tx) => fn(session(tx)))
        : Reflect.get(target, p, r),
  });
}

async function fill(store: Store): Promise<void> {
  const start = Date.now() - 20 * 86_400_000;
  for (let i = 0; i < ENTRIES; i += 2000)
    await store.transaction(async (tx) => {
      for (let j = i; j < Math.min(ENTRIES, i + 2000); j++) {
        const doc: RequestLogDoc = {
          id: `call_fill${j}`,
          tenantId: j % 50 === 0 ? TENANT : `ten_fill${j % 50}`,
          at: new Date(start + j * 10_000).toISOString(),
          source: (['chat', 'agent', 'v1', 'passthrough', 'mcp'] as const)[j % 5],
          requestId: `req_${j}`,
          apiKeyId: `key_${j % 20}`,
          userId: '',
          endUser: '',
          model: `model-${j % 8}`,
          servedModel: `upstream-${j % 8}`,
          provider: 'openai',
          status: j % 30 === 0 ? 'error' : 'ok',
          errorCode: '',
          inputTokens: 500,
          outputTokens: 200,
          credits: 1,
          latencyMs: 300,
          ttftMs: 80,
        };
        await tx.collection(requestLog).insert(doc);
      }
    });
}

function usage(i: number): eventsV1.UsageData {
  return {
    source: 'chat_reply',
    sourceId: `msg_${i}`,
    provider: 'openai',
    model: `model-${i % 8}`,
    inputTokens: 800 + (i % 100),
    outputTokens: 200,
    keySource: 'tenant',
    credentialId: `key_${i % 20}`,
    credentialType: 'api_key',
    estimated: false,
    callId: '',
    projectId: '',
    agentId: '',
    price: { input: 2500, output: 10000, cachedInput: 1250, source: 'platform' },
    call: {
      origin: 'v1',
      requestId: `req_b${i}`,
      endUser: 'user-1',
      status: 'ok',
      errorCode: '',
      latencyMs: 300,
      ttftMs: 80,
      entryId: 'mdl_1',
      servedModel: 'gpt-x',
      userId: '',
    },
  };
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-request-log-'));
  const store = await openSqliteStore({ path: join(dir, 'billing.db') });
  try {
    for (const c of [...ALL_COLLECTIONS, usageRollups, requestLog]) await store.ensure(c as Parameters<Store['ensure']>[0]);
    await grantStartingCredits(store, TENANT, 1_000_000_000);
    console.log(`request log: ${ENTRIES} entries written first`);
    await fill(store);
    const bare = withoutLog(store);
    const withLog: number[] = [];
    const without: number[] = [];
    for (let i = 0; i < SETTLES; i++) {
      // Alternating, so that drift of the machine (load, the WAL's growth) falls on both alike.
      const target = i % 2 === 0 ? store : bare;
      const t0 = process.hrtime.bigint();
      await applyUsage(target, 1, TENANT, usage(i), `evt_bench_${i}`);
      const ms = Number(process.hrtime.bigint() - t0) / 1e6;
      (i % 2 === 0 ? withLog : without).push(ms);
    }
    const logged = await store.collection(requestLog).count({ tenantId: TENANT });
    if (logged !== ENTRIES / 50 + SETTLES / 2) throw new Error(`${logged} entries of the tenant, expected ${ENTRIES / 50 + SETTLES / 2}`);
    const result = {
      entries: ENTRIES,
      settles: SETTLES,
      settleWithLog: { p50Us: us(percentile(withLog, 0.5)), p90Us: us(percentile(withLog, 0.9)) },
      settleWithoutLog: { p50Us: us(percentile(without, 0.5)), p90Us: us(percentile(without, 0.9)) },
      addedP50Us: us(percentile(withLog, 0.5) - percentile(without, 0.5)),
      targetUs: 200,
    };
    console.log(JSON.stringify(result, null, 2));
    writeFileSync(RESULTS, `${JSON.stringify(result, null, 2)}\n`);
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

runBench(main);
