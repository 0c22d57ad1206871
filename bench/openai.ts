/**
 * The OpenAI-compatible API through the whole system as `npm start` runs it, against the fake OpenAI server in a
 * process of its own, in each layout of BENCH_OPENAI_LAYOUTS (default `combined,replicated`), one after the other:
 * `combined` is `npm start` (every service in one process), `replicated` is `npm run start:cluster` (REPLICAS=2
 * GATEWAYS=2 SVC_LAYOUT=per-service; gateway N listens on PORT+N-1, and the clients of both parts are spread over the
 * gateways round-robin, client k to gateway k mod GATEWAYS, as a load balancer in front of them would).
 * Each layout's figures are reported beside the others (`layouts.<name>` in bench/results/openai.json).
 *
 * Time to first token added by the platform (issue 32: p50 under 1 ms, p99 under 5 ms with one client; p99 under
 * 20 ms with 32): each of BENCH_OPENAI_TTFT_CLIENTS (1,32) clients in turn times the fake provider called directly
 * (a streamed chat completion, request sent -> first content delta), then `POST /v1/chat/completions` streamed (->
 * first content delta) and `POST /v1/responses` streamed (-> first `response.output_text.delta`), each through the
 * system with a tenant API key, and REST chat (`POST /api/v1/chat/sessions/:id/messages` then its `/stream` -> first
 * `message.delta`; each client its own session). Added = system - direct of the same client's round. The issue's
 * target for `/v1/responses` and REST chat, within 20 % of chat completions, is reported as the ratio of their p50
 * time to first token to chat completions' (`vsChatCompletions`). A response stores each chunk
 * before sending it (so any stream can be resumed): its figure includes that. One client runs BENCH_OPENAI_ROUNDS
 * (300) rounds, each of 32 clients BENCH_OPENAI_ROUNDS_MANY (20).
 *
 * Load: BENCH_OPENAI_CLIENTS (32) clients sending non-streamed `POST /v1/chat/completions` back to back for
 * BENCH_OPENAI_LOAD_SECONDS (15) per round, BENCH_OPENAI_LOAD_ROUNDS (3) rounds: requests a second, the system's CPU
 * per call, and the answers by status (every one must be a 2xx; the bench tenant has credits and limits to spare);
 * with several gateways, one autocannon per gateway with its share of the clients, run together and summed (p50 and
 * p99 are the slowest gateway's). With BENCH_BEFORE=<another checkout, installed> its system is measured in the same
 * run (both parts), the two taking turns to go first (a checkout whose second gateway has no known port gets the whole
 * load on its first). BENCH_OPENAI_ONLY=ttft|load runs one part. The load part also measures the shape's floor
 * (`floor`, bench/fixtures/relay-floor.ts: a Fastify front, one gRPC hop, the provider call, and none of the
 * platform's work) and the fake provider called directly (`direct`), in the same rounds: the most any system of this
 * shape could do on this machine, and the issue's other yardstick (at least 0.15 of the direct call's rate).
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
/** BENCH_OPENAI_FLOOR=false leaves out the floor and the direct call of the load part. */
const FLOOR = process.env.BENCH_OPENAI_FLOOR !== 'false';
/** The layouts measured, by name: the settings `npm start` reads. */
const LAYOUTS: Record<string, Record<string, string>> = {
  combined: { SVC_LAYOUT: 'combined', REPLICAS: '1', GATEWAYS: '1' },
  replicated: { SVC_LAYOUT: 'per-service', REPLICAS: '2', GATEWAYS: '2' },
};
const RUN_LAYOUTS = (process.env.BENCH_OPENAI_LAYOUTS ?? 'combined,replicated').split(',');
for (const name of RUN_LAYOUTS) if (!LAYOUTS[name]) throw new Error(`BENCH_OPENAI_LAYOUTS: unknown layout ${name}`);

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const round2 = (x: number) => Math.round(x * 100) / 100;
const stats = (xs: number[]) => ({ p50: round2(pct(xs, 50)), p99: round2(pct(xs, 99)), n: xs.length });
/** What each timing adds over the direct call of the same client's round. */
const added = (through: number[], direct: number[]) => stats(through.map((x, i) => x - direct[i]));
/** The streamed chat completion every TTFT round sends (to the provider directly, and through the floor). */
const streamedProbe = (i: number) => ({
  model: 'gpt-bench',
  stream: true,
  stream_options: { include_usage: true },
  messages: [{ role: 'user', content: `ttft probe ${i}` }],
});
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
  /** The first gateway's URL (the tenant is set up through it). */
  base: string;
  /** Every gateway's URL: client k of a part calls `bases[k % bases.length]`. */
  bases: string[];
  apiKey: string;
  /** The launcher's process: its tree is the whole system (for the CPU it spends). */
  pid: number;
}

interface LayoutResult {
  ttft?: Awaited<ReturnType<typeof ttftPhase>>;
  load?: Awaited<ReturnType<typeof loadPhase>>;
}

async function main() {
  const llm = await startProcess('bench/fixtures/fake-llm.ts');
  const llmOrigin = `http://127.0.0.1:${llm.port}`;
  const llmUrl = `${llmOrigin}/v1`;
  // A layout or part not run this time keeps its previous figures.
  const previous = existsSync(RESULTS) ? (JSON.parse(readFileSync(RESULTS, 'utf8')) as { layouts?: Record<string, LayoutResult> }) : {};
  const layouts: Record<string, LayoutResult> = { ...previous.layouts };
  const failures: string[] = [];
  for (const layout of RUN_LAYOUTS) {
    console.log(`\n=== layout: ${layout} (${JSON.stringify(LAYOUTS[layout])})`);
    const systems = await startSystems(llmUrl, LAYOUTS[layout]);
    // Beside the systems: the shape's floor, and (under load) the provider called directly (the fake's own process).
    const floor = FLOOR ? await startFloor(llmUrl) : null;
    const ttft = ONLY === 'load' ? undefined : await ttftPhase(llmUrl, systems, floor);
    const beside = floor ? [floor, { name: 'direct', base: llmOrigin, bases: [llmOrigin], apiKey: 'sk-bench', pid: llm.proc.pid! }] : [];
    const loadResult = ONLY === 'ttft' ? undefined : await loadPhase([...systems, ...beside]);
    await stopSystems(floor ? [...systems, floor] : systems);
    layouts[layout] = { ttft: ttft ?? layouts[layout]?.ttft, load: loadResult ?? layouts[layout]?.load };
    // This checkout must answer every call with a 2xx; an earlier one (BENCH_BEFORE) is measured, not judged.
    if (loadResult?.this && loadResult.this.non2xx > 0) failures.push(`${layout}: some answers under load were not 2xx`);
    const thisTtft = (ttft as Record<string, Record<string, { non200: Record<string, number> }>> | undefined)?.this ?? {};
    if (Object.values(thisTtft).some((r) => Object.keys(r.non200).length))
      failures.push(`${layout}: some streamed calls were not answered 200`);
  }
  writeFileSync(RESULTS, JSON.stringify({ date: new Date().toISOString(), node: process.version, layouts }, null, 2) + '\n');
  console.log(`\nwritten to ${RESULTS}`);
  if (failures.length) throw new Error(failures.join('; '));
}

/** Stops the systems (each launcher's process group) and waits until their processes are gone. */
async function stopSystems(systems: System[]): Promise<void> {
  for (const s of systems) {
    try {
      process.kill(-s.pid, 'SIGTERM');
    } catch {
      // already gone
    }
  }
  for (const deadline = Date.now() + 30_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 200)))
    if (systems.every((s) => processTree(s.pid).length === 0)) return;
}

/** The shape's floor (bench/fixtures/relay-floor.ts): a Fastify front, a gRPC hop and the provider call, nothing else. */
async function startFloor(llmUrl: string): Promise<System> {
  const { proc, port } = await startProcess('bench/fixtures/relay-floor.ts', { LLM_URL: llmUrl }, [], { detached: true });
  const base = `http://127.0.0.1:${port}`;
  return { name: 'floor', base, bases: [base], apiKey: 'floor', pid: proc.pid! };
}

/** This checkout's system (and BENCH_BEFORE's) in one layout, each with a tenant whose model is the fake provider. */
async function startSystems(llmUrl: string, layout: Record<string, string>): Promise<System[]> {
  const systems: System[] = [];
  for (const [name, root] of [['this', ROOT], ...(BEFORE ? [['before', resolve(BEFORE)]] : [])]) {
    const { ports, pid } = await startNpmStart(root, { ...layout, EGRESS_ALLOW_PRIVATE: 'true', BILLING_STARTING_GRANT: '1000000000' });
    const bases = ports.map((port) => `http://127.0.0.1:${port}`);
    const base = bases[0];
    const tenant = await benchTenant(`${base}/api/v1`);
    await call(`${base}/api/v1`, 'PATCH', '/tenant/settings/llm', tenant.accessToken, {
      provider: 'openai',
      model: 'gpt-bench',
      baseUrl: llmUrl,
      apiKey: 'sk-bench',
    });
    systems.push({ name, base, bases, apiKey: tenant.apiKey, pid });
  }
  return systems;
}

/** `clients` clients each timing `rounds` rounds (after the warm-up) of direct, completions and responses. */
async function ttftRounds(llmUrl: string, s: System, clients: number, rounds: number) {
  const direct: number[] = [];
  const completions: number[] = [];
  const responses: number[] = [];
  const restChat: number[] = [];
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
  /** REST chat: the message posted (202), then its reply's stream read to the first delta, timed from the post. */
  const restChatTtft = async (api: string, session: string, i: number): Promise<number | null> => {
    const t0 = now();
    const posted = await fetch(`${api}/chat/sessions/${session}/messages`, post(bearer, { content: `ttft probe ${i}` }));
    if (posted.status !== 202) {
      non200[posted.status] = (non200[posted.status] ?? 0) + 1;
      await posted.text();
      return null;
    }
    await posted.text();
    const sentAt = now() - t0;
    const streamed = await through(
      `${api}/chat/sessions/${session}/stream`,
      { headers: { authorization: bearer } },
      /event: message\.delta/,
    );
    return streamed === null ? null : sentAt + streamed;
  };
  // Client k calls gateway k mod the gateways (round-robin, as a load balancer would spread them).
  const client = async (_: unknown, k: number) => {
    const base = s.bases[k % s.bases.length];
    const api = `${base}/api/v1`;
    let session = '';
    for (let i = 0; i < rounds + WARMUP; i++) {
      // A fresh session every 50 messages keeps the history (sent to the model each time) short.
      if (i % 50 === 0) session = (await call(api, 'POST', '/chat/sessions', s.apiKey, { title: 'ttft' })).id as string;
      const d = await ttft(`${llmUrl}/chat/completions`, post('Bearer sk-bench', streamedProbe(i)), /"content":"[^"]/);
      const c = await through(
        `${base}/v1/chat/completions`,
        post(bearer, { model: 'gpt-bench', stream: true, messages: messages(i) }),
        /"content":"[^"]/,
      );
      // store: false keeps the bench from filling sessions; the chunks are stored all the same.
      const r = await through(
        `${base}/v1/responses`,
        post(bearer, { model: 'gpt-bench', stream: true, store: false, input: `ttft probe ${i}` }),
        /response\.output_text\.delta/,
      );
      const rc = await restChatTtft(api, session, i);
      if (i < WARMUP || c === null || r === null || rc === null) continue;
      direct.push(d);
      completions.push(c);
      responses.push(r);
      restChat.push(rc);
    }
  };
  await Promise.all(Array.from({ length: clients }, client));
  return {
    directMs: stats(direct),
    chatCompletionsMs: stats(completions),
    responsesMs: stats(responses),
    chatCompletionsAddedMs: added(completions, direct),
    responsesAddedMs: added(responses, direct),
    restChatMs: stats(restChat),
    restChatAddedMs: added(restChat, direct),
    // p50 time to first token over chat completions' (the issue's target: at most 1.2).
    vsChatCompletions: {
      responses: round2(pct(responses, 50) / pct(completions, 50)),
      restChat: round2(pct(restChat, 50) / pct(completions, 50)),
    },
    non200,
  };
}

/** The floor's streamed chat completions, timed as the systems' are (each round: direct, then through the floor). */
async function floorTtftRounds(llmUrl: string, floor: System, clients: number, rounds: number) {
  const direct: number[] = [];
  const through: number[] = [];
  const client = async () => {
    for (let i = 0; i < rounds + WARMUP; i++) {
      const d = await ttft(`${llmUrl}/chat/completions`, post('Bearer sk-bench', streamedProbe(i)), /"content":"[^"]/);
      const f = await ttft(`${floor.base}/v1/chat/completions`, post('Bearer sk-bench', streamedProbe(i)), /"content":"[^"]/);
      if (i < WARMUP) continue;
      direct.push(d);
      through.push(f);
    }
  };
  await Promise.all(Array.from({ length: clients }, client));
  return {
    directMs: stats(direct),
    chatCompletionsMs: stats(through),
    chatCompletionsAddedMs: added(through, direct),
  };
}

async function ttftPhase(llmUrl: string, systems: System[], floor: System | null) {
  const out: Record<string, Record<string, unknown>> = {};
  for (const clients of TTFT_CLIENTS) {
    if (floor) {
      const r = await floorTtftRounds(llmUrl, floor, clients, clients === 1 ? ROUNDS : ROUNDS_MANY);
      (out.floor ??= {})[`clients${clients}`] = r;
      console.log(`TTFT, floor, ${clients} client(s): direct`, r.directMs);
      console.log('  added, chat completions', r.chatCompletionsAddedMs);
    }
    for (const s of clients % 2 ? systems : [...systems].reverse()) {
      const r = await ttftRounds(llmUrl, s, clients, clients === 1 ? ROUNDS : ROUNDS_MANY);
      (out[s.name] ??= {})[`clients${clients}`] = r;
      console.log(`TTFT, ${s.name}, ${clients} client(s): direct`, r.directMs);
      console.log('  added, chat completions', r.chatCompletionsAddedMs);
      console.log('  added, responses       ', r.responsesAddedMs);
      console.log('  added, REST chat       ', r.restChatAddedMs);
      console.log('  p50 over chat completions', r.vsChatCompletions);
      if (Object.keys(r.non200).length) console.log('  answers other than 200, by status', r.non200);
    }
  }
  return { ...out, targetAddedMs: { clients1: { p50: 1, p99: 5 }, clients32: { p99: 20 } }, targetVsChatCompletions: 1.2 };
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

/**
 * `POST /v1/chat/completions` load with its clients spread over the gateways round-robin (client k to gateway k mod
 * the gateways): one autocannon per gateway with its share, all at once; their counts summed, p50 and p99 the slowest
 * gateway's.
 */
async function loadSpread(bases: string[], options: Parameters<typeof load>[1]): Promise<LoadResult> {
  // Gateway g has the clients k = g, g + n, g + 2n, ... below options.connections (n gateways).
  const shares = bases
    .map((base, g) => ({ base, connections: Math.ceil((options.connections - g) / bases.length) }))
    .filter((share) => share.connections > 0);
  const rs = await Promise.all(
    shares.map((share) => load(`${share.base}/v1/chat/completions`, { ...options, connections: share.connections })),
  );
  const statuses: Record<string, number> = {};
  for (const r of rs) for (const [status, n] of Object.entries(r.statuses)) statuses[status] = (statuses[status] ?? 0) + n;
  const sum = (pick: (r: LoadResult) => number) => rs.reduce((n, r) => n + pick(r), 0);
  return {
    requests: sum((r) => r.requests),
    rps: sum((r) => r.rps),
    p50: Math.max(...rs.map((r) => r.p50)),
    p99: Math.max(...rs.map((r) => r.p99)),
    errors: sum((r) => r.errors),
    non2xx: sum((r) => r.non2xx),
    statuses,
  };
}

async function loadPhase(systems: System[]) {
  // CPU-seconds the system's processes spent per round: on a machine shared with other work, CPU per call is steadier
  // than calls per second (which counts the time other processes held the cores).
  const runs: Record<string, Array<LoadResult & { cpuS: number }>> = Object.fromEntries(systems.map((s) => [s.name, []]));
  const cpuAt: Record<string, { before: Map<string, number>; after: Map<string, number> }> = {};
  for (let round = 1; round <= LOAD_ROUNDS; round++) {
    for (const s of round % 2 ? systems : [...systems].reverse()) {
      const cpu0 = cpuByProcess(s.pid);
      const r = await loadSpread(s.bases, {
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
