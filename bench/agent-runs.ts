/**
 * Agent runs through the whole system (gateway, identity, projects and agents as separate processes, embedded
 * store and bus) against the fake OpenAI server in this process, which answers at once: what is measured is the
 * system's own cost around the model call.
 *
 * - execute: latency of `POST /agents/:id/execute` (202): three gRPC calls (project, LLM settings, delegation) and
 *   one insert.
 * - run overhead: a manual run's createdAt -> completedAt (server clock) minus the provider's own time, one run at a
 *   time: queue pick-up, settings and project lookups, the streamed model call, the step and events written.
 * - tool step: an autonomous run with one tool call (two model calls and a projects update), same measure.
 * - throughput: BENCH_RUNS runs executed at once, completed by the worker (AGENTS_WORKER_CONCURRENCY 4).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { startFakeOpenAI } from '@svc/llm/testing';
import { call, ROOT, runBench, startProcess, UNCAPPED } from './lib';

const SEQUENTIAL = Number(process.env.BENCH_SEQUENTIAL_RUNS ?? 100);
const CONCURRENT = Number(process.env.BENCH_RUNS ?? 200);
const RESULTS = resolve(ROOT, 'bench/results/agent-runs.json');

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const round2 = (x: number) => Math.round(x * 100) / 100;
const stats = (xs: number[]) => ({ p50: round2(pct(xs, 50)), p99: round2(pct(xs, 99)), n: xs.length });

async function main() {
  const fake = await startFakeOpenAI();
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-runs-'));
  const env = { DATA_DIR: dataDir, ...UNCAPPED, EGRESS_ALLOW_PRIVATE: 'true' };
  const identity = await startProcess('services/identity/src/main.ts', { ...env, IDENTITY_PORT: '0' });
  const peers = { IDENTITY_ADDR: `127.0.0.1:${identity.port}` };
  const projects = await startProcess('services/projects/src/main.ts', { ...env, ...peers, PROJECTS_PORT: '0' });
  const agents = await startProcess('services/agents/src/main.ts', {
    ...env,
    ...peers,
    PROJECTS_ADDR: `127.0.0.1:${projects.port}`,
    AGENTS_PORT: '0',
  });
  const gateway = await startProcess('gateway/src/main.ts', {
    ...env,
    ...peers,
    PORT: '0',
    PROJECTS_ADDR: `127.0.0.1:${projects.port}`,
    AGENTS_ADDR: `127.0.0.1:${agents.port}`,
  });
  const base = `http://127.0.0.1:${gateway.port}/api/v1`;
  const api = (method: string, path: string, token: string | null, body?: unknown) => call(base, method, path, token, body);
  const reg = await api('POST', '/auth/register', null, {
    email: `runs${Date.now()}@example.com`,
    password: 'bench-password',
    name: 'B',
    tenantName: 'B',
  });
  const token: string = reg.accessToken;
  await api('PATCH', '/tenant/settings/llm', token, { provider: 'openai-compatible', model: 'fake', baseUrl: fake.url });
  const project = await api('POST', '/projects', token, { name: 'bench', description: 'd', language: 'go' });
  const manual = await api('POST', '/agents', token, { name: 'manual', config: { autonomyLevel: 'manual' } });
  const auto = await api('POST', '/agents', token, { name: 'auto', config: { autonomyLevel: 'autonomous' } });

  const execute = (agentId: string, goal: string) => api('POST', `/agents/${agentId}/execute`, token, { goal, projectId: project.id });
  const waitDone = async (agentId: string, runId: string) => {
    for (;;) {
      const run = await api('GET', `/agents/${agentId}/runs/${runId}`, token);
      if (run.status === 'completed') return run;
      if (run.status === 'failed' || run.status === 'cancelled') throw new Error(`run ${runId} ${run.status}: ${run.error}`);
      await new Promise((r) => setTimeout(r, 2));
    }
  };
  /** createdAt -> completedAt minus the time the fake spent answering the model calls (ms). */
  const overhead = (run: { createdAt: string; completedAt: string }, providerMs: number) =>
    Date.parse(run.completedAt) - Date.parse(run.createdAt) - providerMs;

  // The fake's time per model call, measured from here with the same client stack (fetch) the agents service uses.
  const providerMs: number[] = [];
  for (let i = 0; i < 50; i++) {
    const t0 = performance.now();
    const res = await fetch(`${fake.url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fake', stream: true, messages: [{ role: 'user', content: `ping ${i}` }] }),
    });
    await res.text();
    providerMs.push(performance.now() - t0);
  }
  const provider = pct(providerMs, 50);

  for (let i = 0; i < 10; i++) await waitDone(manual.id, (await execute(manual.id, `warm ${i}`)).id);

  const executeMs: number[] = [];
  const runOverhead: number[] = [];
  for (let i = 0; i < SEQUENTIAL; i++) {
    const t0 = performance.now();
    const run = await execute(manual.id, `sequential ${i}`);
    executeMs.push(performance.now() - t0);
    runOverhead.push(overhead(await waitDone(manual.id, run.id), provider));
  }

  const toolOverhead: number[] = [];
  for (let i = 0; i < Math.max(10, SEQUENTIAL / 4); i++) {
    fake.script({ type: 'tool_calls', toolCalls: [{ name: 'update_project', arguments: { description: `run ${i}` } }] });
    const run = await execute(auto.id, `tool ${i}`);
    const done = await waitDone(auto.id, run.id);
    if (done.steps.length !== 3) throw new Error(`expected 3 steps, got ${done.steps.length}`);
    toolOverhead.push(overhead(done, 2 * provider));
  }

  // 20 clients execute at once; completion is then awaited in queue order (first in, first done) without
  // flooding the gateway with polls that would compete with the worker for the CPU.
  const t0 = performance.now();
  const batch: Array<{ id: string }> = [];
  await Promise.all(
    Array.from({ length: 20 }, async (_, c) => {
      for (let i = c; i < CONCURRENT; i += 20) batch.push(await execute(manual.id, `concurrent ${i}`));
    }),
  );
  for (const r of batch) {
    for (;;) {
      const run = await api('GET', `/agents/${manual.id}/runs/${r.id}`, token);
      if (run.status === 'completed') break;
      if (run.status === 'failed') throw new Error(`run ${r.id} failed: ${run.error}`);
      await new Promise((res) => setTimeout(res, 20));
    }
  }
  const seconds = (performance.now() - t0) / 1000;

  const result = {
    date: new Date().toISOString(),
    node: process.version,
    providerCallMs: round2(provider),
    executeMs: stats(executeMs),
    manualRunOverheadMs: stats(runOverhead),
    toolRunOverheadMs: stats(toolOverhead),
    throughput: { runs: CONCURRENT, seconds: Number(seconds.toFixed(2)), runsPerSecond: Math.round(CONCURRENT / seconds) },
  };
  console.log(JSON.stringify(result, null, 2));
  writeFileSync(RESULTS, JSON.stringify(result, null, 2) + '\n');
  console.log(`written to ${RESULTS}`);
  await fake.close();
}

runBench(main);
