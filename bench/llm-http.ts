/**
 * `npm run bench:llm-http`: what the provider call's HTTP client costs (issue 32), fetch and its WHATWG streams
 * against undici's `request` and a Node readable, in one run. Not run in CI.
 *
 * A fake OpenAI server runs in its own process (so this process's CPU is the client's alone); each path makes
 * BENCH_LLM_HTTP_CALLS streamed chat completions to it, one at a time (p50 latency) and then 16 at a time (CPU per
 * call under load), in rounds alternating the paths (A B B A...) so that the machine's drift falls on all of them.
 *
 * Raw transports, the SSE read through the same decoder (`decodeSse`):
 *   - `fetch`: global fetch, the body read by its WHATWG reader (the providers' path before, with no egress guard);
 *   - `egressFetch`: the same behind kit's egress guard (undici fetch, a byte-capping ReadableStream, a new Response):
 *     what chat and agents used before;
 *   - `request`: undici's request on a keep-alive Agent, the body a Node readable (`sendHttp`, the default now);
 *   - `egressStream`: the same behind the egress guard (what chat and agents use now).
 * Whole provider calls (createProvider(...).stream, translation included) on the transports of now:
 *   - `provider:request`, `provider:egressStream`;
 *   - with BENCH_LLM_BASELINE=<a checkout's packages/llm/src/index.ts> (main's, say), also that checkout's provider
 *     on its own `fetch` setting: `baseline:fetch` (global fetch) and `baseline:egressFetch`.
 * Results go to bench/results/llm-http.json.
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { egressFetch, egressStream } from '@svc/kit';
import { createProvider, sendHttp, throughEgress, type LlmProvider, type LlmTransport } from '@svc/llm';
import { decodeSse } from '../packages/llm/src/sse';
import { ROOT, runBench } from './lib';

const CALLS = Number(process.env.BENCH_LLM_HTTP_CALLS ?? 1_000);
const ROUNDS = Number(process.env.BENCH_LLM_HTTP_ROUNDS ?? 4);
const CONCURRENCY = 16;
const RESULTS = resolve(ROOT, 'bench/results/llm-http.json');

const percentile = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) * p)];
const round = (x: number) => Math.round(x * 100) / 100;

type Call = () => Promise<void>;

const chatBody = JSON.stringify({
  model: 'gpt-4o-mini',
  messages: [{ role: 'user', content: 'one two three four five six seven eight' }],
  stream: true,
  stream_options: { include_usage: true },
});
const headers = { 'content-type': 'application/json', accept: 'application/json', authorization: 'Bearer sk-bench' };

async function readSse(chunks: AsyncIterable<Uint8Array>): Promise<void> {
  let done = false;
  for await (const m of decodeSse(chunks)) if (m.data === '[DONE]') done = true;
  if (!done) throw new Error('the stream ended before [DONE]');
}

async function* webChunks(body: ReadableStream<Uint8Array>): AsyncGenerator<Uint8Array> {
  const reader = body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    yield value;
  }
}

function viaFetch(url: string, f: (url: string, init: RequestInit) => Promise<Response>): Call {
  return async () => {
    const response = await f(url, { method: 'POST', headers, body: chatBody, signal: new AbortController().signal });
    if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
    await readSse(webChunks(response.body));
  };
}

function viaTransport(url: string, send: LlmTransport): Call {
  return async () => {
    const reply = await send(url, { method: 'POST', headers, body: chatBody, signal: new AbortController().signal });
    if (reply.status !== 200) throw new Error(`HTTP ${reply.status}`);
    await readSse(reply.body);
  };
}

function viaProvider(provider: LlmProvider): Call {
  const request = { messages: [{ role: 'user' as const, content: 'one two three four five six seven eight' }] };
  return async () => {
    let finished = false;
    for await (const event of provider.stream(request)) if (event.type === 'finish') finished = true;
    if (!finished) throw new Error('no finish');
  };
}

interface Sample {
  latencyUs: number[];
  cpuUsSequential: number[];
  cpuUsConcurrent: number[];
  callsPerSecondConcurrent: number[];
}

async function measure(call: Call, sample: Sample): Promise<void> {
  for (let i = 0; i < 50; i++) await call(); // warm the pool and the JIT
  let cpu = process.cpuUsage();
  for (let i = 0; i < CALLS; i++) {
    const t0 = process.hrtime.bigint();
    await call();
    sample.latencyUs.push(Number(process.hrtime.bigint() - t0) / 1e3);
  }
  let used = process.cpuUsage(cpu);
  sample.cpuUsSequential.push((used.user + used.system) / CALLS);
  cpu = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next++ < CALLS) await call();
    }),
  );
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  used = process.cpuUsage(cpu);
  sample.cpuUsConcurrent.push((used.user + used.system) / CALLS);
  sample.callsPerSecondConcurrent.push(CALLS / seconds);
}

/** The fake OpenAI server in its own process; resolves with its base URL. */
function startFake(): Promise<{ url: string; stop: () => void }> {
  return new Promise((ok, fail) => {
    const proc = spawn(process.execPath, ['--import', 'tsx', resolve(ROOT, 'packages/llm/src/testing/serve.ts')], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    proc.stdout.on('data', (c: Buffer) => {
      out += c.toString();
      const line = out.split('\n')[0];
      if (out.includes('\n')) ok({ url: (JSON.parse(line) as { openai: string }).openai, stop: () => proc.kill('SIGTERM') });
    });
    proc.once('exit', (code) => fail(new Error(`the fake exited with ${code}`)));
  });
}

async function main(): Promise<void> {
  const fake = await startFake();
  try {
    const url = `${fake.url}/chat/completions`;
    const settings = { provider: 'openai' as const, baseUrl: fake.url, apiKey: 'sk-bench', model: 'gpt-4o-mini', maxRetries: 0 };
    const policy = { allowPrivate: true };
    const paths: Record<string, Call> = {
      fetch: viaFetch(url, (u, init) => fetch(u, init)),
      egressFetch: viaFetch(url, egressFetch(policy)),
      request: viaTransport(url, sendHttp),
      egressStream: viaTransport(url, throughEgress(egressStream(policy))),
      'provider:request': viaProvider(createProvider(settings)),
      'provider:egressStream': viaProvider(createProvider({ ...settings, transport: throughEgress(egressStream(policy)) })),
    };
    const baseline = process.env.BENCH_LLM_BASELINE;
    if (baseline) {
      // eslint-disable-next-line @typescript-eslint/no-require-imports -- a checkout chosen at run time
      const old = require(resolve(baseline)) as {
        createProvider(s: object): LlmProvider;
        throughEgress(f: unknown): unknown;
      };
      paths['baseline:fetch'] = viaProvider(old.createProvider(settings));
      paths['baseline:egressFetch'] = viaProvider(old.createProvider({ ...settings, fetch: old.throughEgress(egressFetch(policy)) }));
    }
    const names = Object.keys(paths);
    const samples = Object.fromEntries(
      names.map((n) => [n, { latencyUs: [], cpuUsSequential: [], cpuUsConcurrent: [], callsPerSecondConcurrent: [] } as Sample]),
    );
    for (let r = 0; r < ROUNDS; r++) {
      for (const name of r % 2 === 0 ? names : [...names].reverse()) {
        await measure(paths[name], samples[name]);
        console.log(`round ${r + 1}/${ROUNDS} ${name}: cpu ${round(samples[name].cpuUsSequential.at(-1)!)} us/call`);
      }
    }
    const median = (xs: number[]) => round(percentile(xs, 0.5));
    const figures = Object.fromEntries(
      names.map((n) => {
        const s = samples[n];
        return [
          n,
          {
            p50LatencyUs: median(s.latencyUs),
            p99LatencyUs: round(percentile(s.latencyUs, 0.99)),
            cpuUsPerCallSequential: median(s.cpuUsSequential),
            cpuUsPerCallConcurrent: median(s.cpuUsConcurrent),
            callsPerSecondConcurrent: Math.round(percentile(s.callsPerSecondConcurrent, 0.5)),
          },
        ];
      }),
    );
    const result = {
      date: new Date().toISOString(),
      node: process.version,
      calls: CALLS,
      rounds: ROUNDS,
      concurrency: CONCURRENCY,
      figures,
    };
    console.log(JSON.stringify(result, null, 2));
    writeFileSync(RESULTS, `${JSON.stringify(result, null, 2)}\n`);
  } finally {
    fake.stop();
  }
}

runBench(main);
