/**
 * `npm run bench:billing`: the credit ledger under usage load, and what the credit check adds to a model call.
 *
 * - usage apply rate: BENCH_USAGE_EVENTS `llm.usage` events over 50 tenants and 7 API keys, written to the embedded
 *   bus that billing (its own process, as `npm start` runs it) consumes. Measured: events applied per second until
 *   every one is in the ledger. Baseline in the same run: the same messages read by a consumer that does nothing
 *   (the bus alone). Checked: the ledger holds exactly one entry per event. (The embedded log drops a second publish
 *   of an id, so redelivery is exercised by the tests, not here.)
 * - credit check: the contracts package's CreditReservations (what agents' execute and chat's post call) against the live billing
 *   process, timed per call: one reservation and its release (a transaction each in billing), the cost a request
 *   pays.
 * Results go to bench/results/billing.json.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import Database from 'better-sqlite3';
import { openEmbeddedBus, type BusMessage } from '@svc/kit';
import { CreditReservations, domainEvent, TOPICS } from '@svc/contracts';
import { call, ROOT, runBench, startProcess, UNCAPPED } from './lib';

const EVENTS = Number(process.env.BENCH_USAGE_EVENTS ?? 20_000);
const CHECKS = Number(process.env.BENCH_CREDIT_CHECKS ?? 5_000);
const RESULTS = resolve(ROOT, 'bench/results/billing.json');

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const micros = (ms: number) => Math.round(ms * 1000 * 10) / 10;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function usageEvents(n: number): BusMessage[] {
  return Array.from({ length: n }, (_, i) =>
    domainEvent(TOPICS.chat, 'llm.usage', `ten_bench${i % 50}`, {
      $case: 'usage',
      value: {
        source: 'chat_reply',
        sourceId: `msg_bench${i}`,
        provider: 'openai',
        model: 'gpt-bench',
        inputTokens: 700,
        outputTokens: 300,
        keySource: 'tenant',
        credentialId: `key_bench${i % 7}`,
        credentialType: 'api_key',
        estimated: false,
        callId: '',
        projectId: '',
        agentId: '',
      },
    }),
  );
}

async function publish(busPath: string, events: BusMessage[]): Promise<void> {
  const bus = openEmbeddedBus({ path: busPath });
  try {
    for (let i = 0; i < events.length; i += 500) {
      await bus.publish(events.slice(i, i + 500));
    }
  } finally {
    await bus.close();
  }
}

/** The bus alone: a consumer group that only counts, over the same log. */
async function baselineRead(busPath: string, expected: number): Promise<number> {
  const bus = openEmbeddedBus({ path: busPath });
  let seen = 0;
  const started = performance.now();
  const done = new Promise<void>((ok) => {
    void bus.subscribe({
      group: `bench-baseline-${randomUUID()}`,
      topics: [TOPICS.chat],
      handler: async () => {
        if (++seen === expected) ok();
      },
    });
  });
  await done;
  const ms = performance.now() - started;
  await bus.close();
  return ms;
}

runBench(async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'bench-billing-'));
  try {
    const env = { DATA_DIR: dataDir, ...UNCAPPED };
    const identity = await startProcess('services/identity/src/main.ts', { ...env, IDENTITY_PORT: '0' });
    const peers = { ...env, IDENTITY_ADDR: `127.0.0.1:${identity.port}` };
    const billing = await startProcess('services/billing/src/main.ts', { ...peers, BILLING_PORT: '0' });
    const gateway = await startProcess('gateway/src/main.ts', { ...peers, PORT: '0', BILLING_ADDR: `127.0.0.1:${billing.port}` });
    const base = `http://127.0.0.1:${gateway.port}/api/v1`;

    // Usage apply rate.
    const events = usageEvents(EVENTS);
    const ledger = new Database(join(dataDir, 'billing.db'), { readonly: true, fileMustExist: true });
    const usageEntries = ledger.prepare(`SELECT count(*) AS n FROM "ledger" WHERE json_extract(doc, '$.kind') = 'usage'`);
    const started = performance.now();
    await publish(join(dataDir, 'bus.db'), events);
    const publishedMs = performance.now() - started;
    while ((usageEntries.get() as { n: number }).n < EVENTS) await sleep(50);
    const applyMs = performance.now() - started;
    await sleep(1000); // any duplicate still in flight lands now
    const finalCount = (usageEntries.get() as { n: number }).n;
    ledger.close();
    if (finalCount !== EVENTS) throw new Error(`ledger has ${finalCount} usage entries for ${EVENTS} events`);
    const baselineMs = await baselineRead(join(dataDir, 'bus.db'), EVENTS);

    // Credit check cost per request, against the live billing process.
    const reg = await call(base, 'POST', '/auth/register', null, {
      email: `bench${Date.now()}@example.com`,
      password: 'correct horse battery',
      name: 'Bench',
      tenantName: 'Bench',
    });
    while ((await call(base, 'GET', '/billing/summary', reg.accessToken)).credits.balance <= 0) await sleep(50);
    const gate = new CreditReservations(`127.0.0.1:${billing.port}`);
    const times: number[] = [];
    for (let i = 0; i < CHECKS; i++) {
      const callId = `bench-${i}`;
      const t0 = performance.now();
      await gate.reserve(reg.accessToken, { callId, tokens: 100, source: 'chat_reply', sourceId: callId });
      times.push(performance.now() - t0);
      await gate.release(reg.accessToken, callId);
    }
    gate.close();

    const result = {
      at: new Date().toISOString(),
      usage: {
        events: EVENTS,
        appliedOnce: finalCount === EVENTS,
        publishMs: Math.round(publishedMs),
        applyMs: Math.round(applyMs),
        eventsPerSecond: Math.round((EVENTS / applyMs) * 1000),
        baselineBusReadMs: Math.round(baselineMs),
        baselineBusMessagesPerSecond: Math.round((EVENTS / baselineMs) * 1000),
      },
      creditCheckMicros: {
        p50: micros(pct(times, 50)),
        p99: micros(pct(times, 99)),
        p999: micros(pct(times, 99.9)),
        max: micros(Math.max(...times)),
        n: times.length,
      },
    };
    writeFileSync(RESULTS, JSON.stringify(result, null, 2) + '\n');
    console.log(JSON.stringify(result, null, 2));
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});
