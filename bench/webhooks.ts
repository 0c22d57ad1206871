/**
 * `npm run bench` (second part; alone: `npm run bench:webhooks`): the event path from a write to a signed delivery.
 *
 * - project create and list throughput through the gateway (autocannon, separate process);
 * - deliveries per second and event-to-delivery latency (the event's `createdAt`, stamped at the write, to its
 *   arrival at a local receiver): at a steady offered rate, and draining a burst;
 * - recovery (POST /webhooks/:id/recover) of RECOVERY_EVENTS missed events to a local receiver: the call's time,
 *   deliveries per second and the queue wait (p50, p99), beside the steady figures; the missed events are seeded
 *   straight into the webhooks service's event log (an outage's worth of writes would measure nothing else);
 * - the cost of a list page with 1,000 and with 100,000 projects in the tenant (seeded straight into the projects
 *   store: 100,000 HTTP calls would measure nothing else).
 *
 * Every service is its own process, as `npm start` runs them; the receiver and the paced load live in this one.
 * Results go to bench/results/webhooks.json; the previous run's are printed for comparison.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { newId, openStore } from '@svc/kit';
import { projects, type ProjectDoc } from '../services/projects/src/collections';
import { events, type EventDoc } from '../services/webhooks/src/collections';
import { call, load, ROOT, runBench, startProcess, stopAll, UNCAPPED } from './lib';

const RESULTS = resolve(ROOT, 'bench/results/webhooks.json');
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
/** Registrations per tenant in the delivery scenarios: each event fans out to this many deliveries. */
const FAN_OUT = 8;
const STEADY_DELIVERIES_PER_S = Number(process.env.BENCH_DELIVERY_RATE ?? 600);
const STEADY_SECONDS = 10;
const BURST_EVENTS = 500;
const RECOVERY_EVENTS = Number(process.env.BENCH_RECOVERY_EVENTS ?? 10_000);

const percentile = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** CPU seconds (user + system) a process has used so far, from /proc. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (100 Hz)
}

const pids: Record<string, number> = {};
function cpuSnapshot(): Record<string, number> {
  return Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, cpuSeconds(pid)]));
}
function cpuSince(before: Record<string, number>): Record<string, number> {
  const now = cpuSnapshot();
  return Object.fromEntries(Object.keys(now).map((k) => [k, Number((now[k] - before[k]).toFixed(2))]));
}

async function startSystem(dataDir: string) {
  const env = { DATA_DIR: dataDir, ...UNCAPPED, EGRESS_ALLOW_PRIVATE: 'true' };
  const identity = await startProcess('services/identity/src/main.ts', { ...env, IDENTITY_PORT: '0' });
  const peers = { ...env, IDENTITY_ADDR: `127.0.0.1:${identity.port}` };
  const projectsSvc = await startProcess('services/projects/src/main.ts', { ...peers, PROJECTS_PORT: '0' });
  // BENCH_PROFILE=<dir>: a V8 CPU profile of the webhooks process, written there when it stops.
  const profile = process.env.BENCH_PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_PROFILE}`] : [];
  const webhooks = await startProcess('services/webhooks/src/main.ts', { ...peers, WEBHOOKS_PORT: '0' }, profile);
  // The API key view shows the key's usage, which the gateway asks billing for.
  const billing = await startProcess('services/billing/src/main.ts', { ...peers, BILLING_PORT: '0' });
  const gateway = await startProcess('gateway/src/main.ts', {
    ...peers,
    PORT: '0',
    PROJECTS_ADDR: `127.0.0.1:${projectsSvc.port}`,
    WEBHOOKS_ADDR: `127.0.0.1:${webhooks.port}`,
    BILLING_ADDR: `127.0.0.1:${billing.port}`,
  });
  Object.assign(pids, {
    identity: identity.proc.pid!,
    projects: projectsSvc.proc.pid!,
    webhooks: webhooks.proc.pid!,
    gateway: gateway.proc.pid!,
  });
  return `http://127.0.0.1:${gateway.port}/api/v1`;
}

let tenants = 0;
async function tenant(base: string) {
  const n = ++tenants;
  const reg = await call(base, 'POST', '/auth/register', null, {
    email: `bench${Date.now()}-${n}@example.com`,
    password: 'bench-password',
    name: 'Bench',
    tenantName: `Bench ${n}`,
  });
  const key = await call(base, 'POST', '/api-keys', reg.accessToken, { name: 'bench', type: 'sdk', environment: 'production' });
  return { id: reg.tenant.id as string, token: key.key as string };
}

/** The receiver: records when each (path, event) arrived and how long after the event was written. */
async function startReceiver() {
  const arrivals: Array<{ at: number; latencyMs: number }> = [];
  /** Event id -> when it was written (its createdAt), for the breakdown. */
  const eventTimes = new Map<string, number>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const at = Date.now();
      const event = JSON.parse(Buffer.concat(chunks).toString()) as { id: string; createdAt: string };
      const written = Date.parse(event.createdAt);
      arrivals.push({ at, latencyMs: at - written });
      eventTimes.set(event.id, written);
      res.end('ok');
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, arrivals, eventTimes, close: () => server.close() };
}

async function until(check: () => boolean, ms: number) {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('timed out waiting for deliveries');
    await sleep(20);
  }
}

function deliveryFigures(arrivals: Array<{ at: number; latencyMs: number }>, startedAt: number) {
  const last = Math.max(...arrivals.map((a) => a.at));
  const lat = arrivals.map((a) => a.latencyMs);
  return {
    deliveries: arrivals.length,
    deliveriesPerSecond: Math.round(arrivals.length / ((last - startedAt) / 1000)),
    latencyMs: { p50: percentile(lat, 50), p90: percentile(lat, 90), p99: percentile(lat, 99), max: Math.max(...lat) },
  };
}

/**
 * Where the time went, from one registration's delivery records: event written -> delivery record written (the bus
 * and the fan-out) -> first attempt started (the queue).
 */
async function breakdown(base: string, token: string, webhookId: string, eventTimes: Map<string, number>) {
  const fanOut: number[] = [];
  const queued: number[] = [];
  let cursor = '';
  do {
    const page = await fetch(`${base}/webhooks/${webhookId}/deliveries?limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, {
      headers: { authorization: `Bearer ${token}` },
    }).then((r) => r.json() as Promise<{ data: any[]; meta: { pagination: { next_cursor: string | null } } }>);
    for (const d of page.data) {
      const written = eventTimes.get(d.eventId);
      if (written === undefined || !d.attempts[0]) continue;
      fanOut.push(Date.parse(d.createdAt) - written);
      queued.push(Date.parse(d.attempts[0].at) - Date.parse(d.createdAt));
    }
    cursor = page.meta.pagination.next_cursor ?? '';
  } while (cursor);
  const stats = (xs: number[]) => ({ p50: percentile(xs, 50), p99: percentile(xs, 99) });
  return { eventToRecordMs: stats(fanOut), recordToFirstAttemptMs: stats(queued) };
}

async function deliveryScenarios(
  base: string,
  receiverUrl: string,
  arrivals: Array<{ at: number; latencyMs: number }>,
  eventTimes: Map<string, number>,
) {
  const t = await tenant(base);
  let firstHook = '';
  for (let i = 0; i < FAN_OUT; i++) {
    const hook = await call(base, 'POST', '/webhooks', t.token, {
      url: `${receiverUrl}/r${i}`,
      events: ['project.created'],
      secret: `bench-secret-${i}`,
    });
    firstHook ||= hook.id as string;
  }
  // Warm-up: connections, statements, JIT.
  for (let i = 0; i < 20; i++) await call(base, 'POST', '/projects', t.token, { name: `warm ${i}` });
  await until(() => arrivals.length >= 20 * FAN_OUT, 30_000);
  arrivals.length = 0;

  // Steady: events paced so that FAN_OUT deliveries each make the offered delivery rate.
  const eventsPerSecond = STEADY_DELIVERIES_PER_S / FAN_OUT;
  const total = Math.round(eventsPerSecond * STEADY_SECONDS);
  const steadyCpu = cpuSnapshot();
  const steadyStart = Date.now();
  const pending: Array<Promise<unknown>> = [];
  for (let i = 0; i < total; i++) {
    const due = steadyStart + (i * 1000) / eventsPerSecond;
    if (due > Date.now()) await sleep(due - Date.now());
    pending.push(call(base, 'POST', '/projects', t.token, { name: `steady ${i}` }));
  }
  await Promise.all(pending);
  await until(() => arrivals.length >= total * FAN_OUT, 60_000);
  const steady = {
    offeredPerSecond: STEADY_DELIVERIES_PER_S,
    fanOut: FAN_OUT,
    ...deliveryFigures(arrivals, steadyStart),
    cpuSeconds: cpuSince(steadyCpu),
    breakdown: await breakdown(base, t.token, firstHook, eventTimes),
  };
  arrivals.length = 0;
  eventTimes.clear();

  // Burst: events written as fast as the gateway takes them; how fast does the backlog drain?
  const burstCpu = cpuSnapshot();
  const burstStart = Date.now();
  for (let i = 0; i < BURST_EVENTS; i += 25) {
    await Promise.all(Array.from({ length: 25 }, (_, j) => call(base, 'POST', '/projects', t.token, { name: `burst ${i + j}` })));
  }
  const writtenMs = Date.now() - burstStart;
  await until(() => arrivals.length >= BURST_EVENTS * FAN_OUT, 120_000);
  const burst = {
    events: BURST_EVENTS,
    fanOut: FAN_OUT,
    eventsWrittenInMs: writtenMs,
    ...deliveryFigures(arrivals, burstStart),
    cpuSeconds: cpuSince(burstCpu),
    breakdown: await breakdown(base, t.token, firstHook, eventTimes),
  };
  return { steady, burst };
}

/**
 * Recovery of an endpoint that missed RECOVERY_EVENTS events: they are written into the webhooks service's event log
 * (the service reads the same file) as the fan-out would have while the endpoint was disabled, then one POST
 * /webhooks/:id/recover queues them all and the receiver counts them in.
 */
async function recoveryScenario(base: string, dataDir: string, receiverUrl: string, receiver: Awaited<ReturnType<typeof startReceiver>>) {
  const t = await tenant(base);
  const hook = await call(base, 'POST', '/webhooks', t.token, {
    url: `${receiverUrl}/recover`,
    events: ['project.created'],
    secret: 'bench-recovery-secret',
  });
  const from = Date.parse(hook.createdAt as string);
  const store = await openStore({ dbName: 'svc_webhooks', sqlitePath: join(dataDir, 'webhooks.db') });
  for (let i = 0; i < RECOVERY_EVENTS; i += 2000) {
    await store.transaction(async (tx) => {
      for (let j = i; j < Math.min(i + 2000, RECOVERY_EVENTS); j++) {
        const id = newId('evt');
        const createdAt = new Date(from + Math.floor(j / 10)).toISOString();
        const data = {
          id: newId('prj'),
          name: `missed ${j}`,
          description: '',
          language: 'ts',
          created_at: createdAt,
          updated_at: createdAt,
        };
        const body = JSON.stringify({ id, type: 'project.created', createdAt, tenantId: t.id, data });
        const doc: EventDoc = { id, tenantId: t.id, type: 'project.created', createdAt, body };
        await tx.collection(events).insert(doc);
      }
    });
  }
  await store.close();
  await sleep(Math.max(0, from + RECOVERY_EVENTS / 10 + 10 - Date.now())); // every seeded event is in the past
  receiver.arrivals.length = 0;
  receiver.eventTimes.clear();
  const cpu = cpuSnapshot();
  const started = Date.now();
  const { queued } = await call(base, 'POST', `/webhooks/${hook.id}/recover`, t.token, { since: hook.createdAt });
  const callMs = Date.now() - started;
  if (queued !== RECOVERY_EVENTS) throw new Error(`recover queued ${queued} of ${RECOVERY_EVENTS}`);
  await until(() => receiver.arrivals.length >= RECOVERY_EVENTS, 600_000);
  const last = Math.max(...receiver.arrivals.map((a) => a.at));
  const sinceCall = receiver.arrivals.map((a) => a.at - started);
  return {
    events: RECOVERY_EVENTS,
    recoverCallMs: callMs,
    deliveriesPerSecond: Math.round(RECOVERY_EVENTS / ((last - started) / 1000)),
    lastDeliveryAfterMs: last - started,
    arrivalAfterCallMs: { p50: percentile(sinceCall, 50), p99: percentile(sinceCall, 99) },
    cpuSeconds: cpuSince(cpu),
    breakdown: (await breakdown(base, t.token, hook.id as string, receiver.eventTimes)).recordToFirstAttemptMs,
  };
}

/** Seeds `count` projects for a tenant straight into the projects store (the service reads the same file). */
async function seed(dataDir: string, tenantId: string, count: number) {
  const store = await openStore({ dbName: 'svc_projects', sqlitePath: join(dataDir, 'projects.db') });
  const col = store.collection(projects);
  const start = Date.parse('2024-01-01T00:00:00Z');
  for (let i = 0; i < count; i += 5000) {
    await store.transaction(async (tx) => {
      const c = tx.collection(projects);
      for (let j = i; j < Math.min(i + 5000, count); j++) {
        const at = new Date(start + j * 1000).toISOString();
        const doc: ProjectDoc = {
          id: newId('prj'),
          tenantId,
          name: `seeded ${j}`,
          description: '',
          language: 'ts',
          createdAt: at,
          updatedAt: at,
        };
        await c.insert(doc);
      }
    });
  }
  const n = await col.count({ tenantId });
  await store.close();
  return n;
}

async function main() {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-webhooks-'));
  const receiver = await startReceiver();
  const base = await startSystem(dataDir);
  console.log(`webhooks bench: node ${process.version}, data in ${dataDir}\n`);

  const deliveries = await deliveryScenarios(base, receiver.url, receiver.arrivals, receiver.eventTimes);
  console.log('deliveries, steady', deliveries.steady);
  console.log('deliveries, burst ', deliveries.burst);
  const recovery = await recoveryScenario(base, dataDir, receiver.url, receiver);
  console.log('recovery          ', recovery);
  if (process.env.BENCH_PART === 'deliveries') return; // while tuning the delivery path: nothing written

  // Gateway throughput: a tenant without webhooks, so the numbers are the API's alone.
  const writer = await tenant(base);
  const auth = { authorization: `Bearer ${writer.token}`, 'content-type': 'application/json' };
  await load(`${base}/projects`, { connections: CONNECTIONS, seconds: 2, headers: auth, method: 'POST', body: '{"name":"warm"}' });
  const create = await load(`${base}/projects`, {
    connections: CONNECTIONS,
    seconds: SECONDS,
    headers: auth,
    method: 'POST',
    body: '{"name":"bench"}',
  });
  const list = await load(`${base}/projects?limit=20`, {
    connections: CONNECTIONS,
    seconds: SECONDS,
    headers: { authorization: auth.authorization },
  });
  for (const [name, r] of [
    ['create', create],
    ['list', list],
  ] as const)
    if (r.errors || r.non2xx) throw new Error(`${name}: ${r.errors} errors, ${r.non2xx} non-2xx`);
  console.log(`project create ${Math.round(create.rps)} req/s (p50 ${create.p50} ms, p99 ${create.p99} ms)`);
  console.log(`project list   ${Math.round(list.rps)} req/s (p50 ${list.p50} ms, p99 ${list.p99} ms)`);

  // List cost against tenant size: the same first page, and a page deep in the list, at 1k and 100k projects.
  const sizes: Record<string, unknown> = {};
  for (const count of [1_000, 100_000]) {
    const t = await tenant(base);
    const seeded = await seed(dataDir, t.id, count);
    const headers = { authorization: `Bearer ${t.token}` };
    let cursor = '';
    for (let i = 0; i < 5; i++)
      cursor = (
        (await fetch(`${base}/projects?limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, { headers }).then((r) =>
          r.json(),
        )) as { meta: { pagination: { next_cursor: string } } }
      ).meta.pagination.next_cursor;
    await load(`${base}/projects?limit=20`, { connections: 10, seconds: 1, headers });
    const first = await load(`${base}/projects?limit=20`, { connections: 10, seconds: SECONDS, headers });
    const deep = await load(`${base}/projects?limit=20&cursor=${encodeURIComponent(cursor)}`, {
      connections: 10,
      seconds: SECONDS,
      headers,
    });
    sizes[String(count)] = {
      projects: seeded,
      firstPage: { rps: Math.round(first.rps), p50: first.p50, p99: first.p99 },
      pageAfter500: { rps: Math.round(deep.rps), p50: deep.p50, p99: deep.p99 },
    };
    console.log(`list page with ${seeded} projects`, sizes[String(count)]);
  }

  const result = {
    date: new Date().toISOString(),
    node: process.version,
    deliveries,
    recovery,
    gateway: {
      connections: CONNECTIONS,
      seconds: SECONDS,
      projectCreate: { rps: Math.round(create.rps), p50: create.p50, p99: create.p99 },
      projectList: { rps: Math.round(list.rps), p50: list.p50, p99: list.p99 },
    },
    listPageByTenantSize: sizes,
    targets: {
      deliveriesPerSecondAtLeast500: deliveries.burst.deliveriesPerSecond >= 500,
      steadyP99Under500ms: deliveries.steady.latencyMs.p99 < 500,
    },
  };
  console.log('\ntargets', result.targets);
  if (existsSync(RESULTS)) {
    const previous = JSON.parse(readFileSync(RESULTS, 'utf8')) as typeof result;
    console.log(
      `previous run (${previous.date}): steady`,
      previous.deliveries.steady.latencyMs,
      'burst',
      previous.deliveries.burst.deliveriesPerSecond,
      'deliveries/s',
    );
  }
  writeFileSync(RESULTS, JSON.stringify(result, null, 2) + '\n');
  console.log(`written to ${RESULTS}`);
  receiver.close();
  stopAll();
  await sleep(1000);
  rmSync(dataDir, { recursive: true, force: true });
}

runBench(main);
