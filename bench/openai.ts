/**
 * The OpenAI-compatible API through the whole system as `npm start` runs it (SVC_LAYOUT, REPLICAS, GATEWAYS as set)
 * against the fake OpenAI server in a process of its own.
 *
 * Time to first token added by the platform (issue 32: p50 under 1 ms, p99 under 5 ms with one client; p99 under
 * 20 ms with 32): each of BENCH_OPENAI_TTFT_CLIENTS (1,32) clients in turn times the fake provider called directly
 * (a streamed chat completion, request sent -> first content delta), then `POST /v1/chat/completions` streamed (->
 * first content delta) and `POST /v1/responses` streamed (-> first `response.output_text.delta`), each through the
 * system with a tenant API key. Added = system - direct of the same client's round. A response stores each chunk
 * before sending it (so any stream can be resumed): its figure includes that. One client runs BENCH_OPENAI_ROUNDS
 * (300) rounds, each of 32 clients BENCH_OPENAI_ROUNDS_MANY (20).
 *
 * Load: BENCH_OPENAI_CLIENTS (32) clients sending non-streamed `POST /v1/chat/completions` back to back for
 * BENCH_OPENAI_LOAD_SECONDS (15) per round, BENCH_OPENAI_LOAD_ROUNDS (3) rounds: requests a second, the system's CPU
 * per call, and the answers by status (every one must be a 2xx; the bench tenant has credits and limits to spare). With BENCH_BEFORE=<another checkout, installed> its system is measured in the same run
 * (both parts), the two taking turns to go first. BENCH_OPENAI_ONLY=ttft|load runs one part.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import {
  benchTenant,
  call,
  load,
  type LoadResult,
  processLabel,
  processTree,
  ROOT,
  runBench,
  startNpmStart,
  startProcess,
  TICKS,
} from './lib';

const ROUNDS = Number(process.env.BENCH_OPENAI_ROUNDS ?? 300);
const ROUNDS_MANY = Number(process.env.BENCH_OPENAI_ROUNDS_MANY ?? 20);
const TTFT_CLIENTS = (process.env.BENCH_OPENAI_TTFT_CLIENTS ?? '1,32').split(',').map(Number);
const WARMUP = 20;
const RESULTS = resolve(ROOT, 'bench/results/openai.json');
const ONLY = process.env.BENCH_OPENAI_ONLY;
const CLIENTS = Number(process.env.BENCH_OPENAI_CLIENTS ?? 32);
const LOAD_SECONDS = Number(process.env.BENCH_OPENAI_LOAD_SECONDS ?? 15);
const LOAD_ROUNDS = Number(process.env.BENCH_OPENAI_LOAD_ROUNDS ?? 3);
const BEFORE = process.env.BENCH_BEFORE;

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const round2 = (x: number) => Math.round(x * 100) / 100;
const stats = (xs: number[]) => ({ p50: round2(pct(xs, 50)), p99: round2(pct(xs, 99)), n: xs.length });
const now = () => performance.now();

/** A streamed call answered with another status than 200 (counted by system and status, never timed). */
class NotOk extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Time from sending `init` to `url` until `first` matches the text streamed so far; the stream is then dropped. */
async function ttft(url: string, init: RequestInit, first: RegExp): Promise<number> {
  const t0 = now();
  const res = await fetch(url, init);
  if (res.status !== 200) throw new NotOk(res.status, `${url}: ${res.status} ${await res.text()}`);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`${url}: the stream ended without content`);
    text += decoder.decode(value, { stream: true });
    if (first.test(text)) {
      const ms = now() - t0;
      await reader.cancel();
      return ms;
    }
  }
}

const post = (authorization: string, body: unknown): RequestInit => ({
  method: 'POST',
  headers: { 'content-type': 'application/json', authorization },
  body: JSON.stringify(body),
});

interface System {
  name: string;
  base: string;
  apiKey: string;
  /** The launcher's process: its tree is the whole system (for the CPU it spends). */
  pid: number;
}

async function main() {
  const llm = await startProcess('bench/fixtures/fake-llm.ts');
  const llmUrl = `http://127.0.0.1:${llm.port}/v1`;
  const systems = await startSystems(llmUrl);
  const ttft = ONLY === 'load' ? undefined : await ttftPhase(llmUrl, systems);
  const loadResult = ONLY === 'ttft' ? undefined : await loadPhase(systems);
  // A part not run this time keeps its previous figures.
  const previous = existsSync(RESULTS) ? (JSON.parse(readFileSync(RESULTS, 'utf8')) as { ttft?: unknown; load?: unknown }) : {};
  const result = { date: new Date().toISOString(), node: process.version, ttft: ttft ?? previous.ttft, load: loadResult ?? previous.load };
  writeFileSync(RESULTS, JSON.stringify(result, null, 2) + '\n');
  console.log(`\nwritten to ${RESULTS}`);
  // This checkout must answer every call with a 2xx; an earlier one (BENCH_BEFORE) is measured, not judged.
  if (loadResult?.this && loadResult.this.non2xx > 0) throw new Error('some answers under load were not 2xx');
  const thisTtft = (ttft as Record<string, Record<string, { non200: Record<string, number> }>> | undefined)?.this ?? {};
  if (Object.values(thisTtft).some((r) => Object.keys(r.non200).length)) throw new Error('some streamed calls were not answered 200');
}

/** This checkout's system (and BENCH_BEFORE's), each with a tenant whose model is the fake provider. */
async function startSystems(llmUrl: string): Promise<System[]> {
  const systems: System[] = [];
  for (const [name, root] of [['this', ROOT], ...(BEFORE ? [['before', resolve(BEFORE)]] : [])]) {
    const { port, pid } = await startNpmStart(root, { EGRESS_ALLOW_PRIVATE: 'true', BILLING_STARTING_GRANT: '1000000000' });
    const base = `http://127.0.0.1:${port}`;
    const tenant = await benchTenant(`${base}/api/v1`);
    await call(`${base}/api/v1`, 'PATCH', '/tenant/settings/llm', tenant.accessToken, {
      provider: 'openai',
      model: 'gpt-bench',
      baseUrl: llmUrl,
      apiKey: 'sk-bench',
    });
    systems.push({ name, base, apiKey: tenant.apiKey, pid });
  }
  return systems;
}

/** `clients` clients each timing `rounds` rounds (after the warm-up) of direct, completions and responses. */
async function ttftRounds(llmUrl: string, s: System, clients: number, rounds: number) {
  const direct: number[] = [];
  const completions: number[] = [];
  const responses: number[] = [];
  const bearer = `Bearer ${s.apiKey}`;
  const messages = (i: number) => [{ role: 'user', content: `ttft probe ${i}` }];
  // Answers other than 200 from the system, by status: a round with one is not timed, and the bench goes on (an
  // earlier checkout's failures are measured; this one's fail the bench at the end).
  const non200: Record<string, number> = {};
  const through = (url: string, init: RequestInit, first: RegExp) =>
    ttft(url, init, first).catch((err: unknown) => {
      if (!(err instanceof NotOk)) throw err;
      non200[err.status] = (non200[err.status] ?? 0) + 1;
      return null;
    });
  const client = async () => {
    for (let i = 0; i < rounds + WARMUP; i++) {
      const d = await ttft(
        `${llmUrl}/chat/completions`,
        post('Bearer sk-bench', { model: 'gpt-bench', stream: true, stream_options: { include_usage: true }, messages: messages(i) }),
        /"content":"[^"]/,
      );
      const c = await through(
        `${s.base}/v1/chat/completions`,
        post(bearer, { model: 'gpt-bench', stream: true, messages: messages(i) }),
        /"content":"[^"]/,
      );
      // store: false keeps the bench from filling sessions; the chunks are stored all the same.
      const r = await through(
        `${s.base}/v1/responses`,
        post(bearer, { model: 'gpt-bench', stream: true, store: false, input: `ttft probe ${i}` }),
        /response\.output_text\.delta/,
      );
      if (i < WARMUP || c === null || r === null) continue;
      direct.push(d);
      completions.push(c);
      responses.push(r);
    }
  };
  await Promise.all(Array.from({ length: clients }, client));
  return {
    directMs: stats(direct),
    chatCompletionsMs: stats(completions),
    responsesMs: stats(responses),
    chatCompletionsAddedMs: stats(completions.map((c, i) => c - direct[i])),
    responsesAddedMs: stats(responses.map((r, i) => r - direct[i])),
    non200,
  };
}

async function ttftPhase(llmUrl: string, systems: System[]) {
  const out: Record<string, Record<string, Awaited<ReturnType<typeof ttftRounds>>>> = {};
  for (const clients of TTFT_CLIENTS)
    for (const s of clients % 2 ? systems : [...systems].reverse()) {
      const r = await ttftRounds(llmUrl, s, clients, clients === 1 ? ROUNDS : ROUNDS_MANY);
      (out[s.name] ??= {})[`clients${clients}`] = r;
      console.log(`TTFT, ${s.name}, ${clients} client(s): direct`, r.directMs);
      console.log('  added, chat completions', r.chatCompletionsAddedMs);
      console.log('  added, responses       ', r.responsesAddedMs);
      if (Object.keys(r.non200).length) console.log('  answers other than 200, by status', r.non200);
    }
  return { ...out, targetAddedMs: { clients1: { p50: 1, p99: 5 }, clients32: { p99: 20 } } };
}

/** CPU-seconds so far of each process of the tree rooted at `pid`, by its label (services/chat, gateway, ...). */
function cpuByProcess(pid: number): Map<string, number> {
  const out = new Map<string, number>();
  for (const p of processTree(pid)) out.set(processLabel(p.command), (out.get(processLabel(p.command)) ?? 0) + p.cpuTicks / TICKS);
  return out;
}

/** CPU ms a call of each process between two readings, the busiest first, and their sum as `total`. */
function msPerCall(before: Map<string, number>, after: Map<string, number>, calls: number): Record<string, number> {
  const rows = [...after]
    .map(([name, s]): [string, number] => [name, round2(((s - (before.get(name) ?? 0)) * 1000) / Math.max(1, calls))])
    .filter(([, ms]) => ms > 0)
    .sort((a, b) => b[1] - a[1]);
  return { total: round2(rows.reduce((n, [, ms]) => n + ms, 0)), ...Object.fromEntries(rows) };
}

async function loadPhase(systems: System[]) {
  // CPU-seconds the system's processes spent per round: on a machine shared with other work, CPU per call is steadier
  // than calls per second (which counts the time other processes held the cores).
  const runs: Record<string, Array<LoadResult & { cpuS: number }>> = Object.fromEntries(systems.map((s) => [s.name, []]));
  const cpuAt: Record<string, { before: Map<string, number>; after: Map<string, number> }> = {};
  for (let round = 1; round <= LOAD_ROUNDS; round++) {
    for (const s of round % 2 ? systems : [...systems].reverse()) {
      const cpu0 = cpuByProcess(s.pid);
      const r = await load(`${s.base}/v1/chat/completions`, {
        connections: CLIENTS,
        seconds: LOAD_SECONDS,
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${s.apiKey}` },
        body: JSON.stringify({ model: 'gpt-bench', messages: [{ role: 'user', content: 'load probe' }] }),
      });
      const cpu1 = cpuByProcess(s.pid);
      const cpuS = [...cpu1.values()].reduce((n, x) => n + x, 0) - [...cpu0.values()].reduce((n, x) => n + x, 0);
      runs[s.name].push({ ...r, cpuS });
      // Per process, summed over the rounds: the readings before and after each round, accumulated.
      const acc = (cpuAt[s.name] ??= { before: new Map(), after: new Map() });
      for (const [k, v] of cpu0) acc.before.set(k, (acc.before.get(k) ?? 0) + v);
      for (const [k, v] of cpu1) acc.after.set(k, (acc.after.get(k) ?? 0) + v);
      console.log(
        `load, ${s.name}, round ${round}: ${r.rps.toFixed(1)} req/s, ${((cpuS * 1000) / Math.max(1, r.requests)).toFixed(2)} ms of CPU a call, answers by status ${JSON.stringify(r.statuses)}`,
      );
    }
  }
  const summary = Object.fromEntries(
    Object.entries(runs).map(([name, rs]) => {
      const statuses: Record<string, number> = {};
      for (const r of rs) for (const [status, n] of Object.entries(r.statuses)) statuses[status] = (statuses[status] ?? 0) + n;
      const requests = rs.reduce((n, r) => n + r.requests, 0);
      const non2xx = rs.reduce((n, r) => n + r.non2xx, 0);
      return [
        name,
        {
          clients: CLIENTS,
          seconds: LOAD_SECONDS * rs.length,
          requests,
          rps: round2(requests / (LOAD_SECONDS * rs.length)),
          cpuMsPerCall: round2((rs.reduce((n, r) => n + r.cpuS, 0) * 1000) / Math.max(1, requests)),
          cpuMsPerCallByProcess: msPerCall(cpuAt[name].before, cpuAt[name].after, requests),
          non2xx,
          statuses,
        },
      ];
    }),
  );
  for (const [name, r] of Object.entries(summary)) console.log(`load, ${name}:`, r);
  return summary;
}

runBench(main);
