/**
 * `npm run bench:profile`: where the CPU of a request goes, end to end, gateway and service, against the Fastify +
 * grpc-js baseline. Both run in the one-process layout (the gateway, identity, projects and billing, whose key usage the key's view shows, on one event loop, still
 * over loopback gRPC), so a V8 CPU profile (node:inspector) taken while autocannon drives a route sees every layer
 * once. Self time is summed by module and by layer (Fastify, auth, gRPC, proto, the store, GC, metrics, ...) and
 * divided by the requests served: CPU microseconds per request, system beside baseline. On a shared machine this is
 * steadier than req/s, and it says where to look.
 *
 *   npm run bench:profile                      the uncached list and create paths (default)
 *   BENCH_ROUTES=tenant,get npm run bench:profile    the cached reads; also `update`, `me` (GET /auth/me)
 *   BENCH_ROUTES=openai npm run bench:profile        non-streamed POST /v1/chat/completions to the fake provider
 *                                                    (its own process), chat and agents in the profiled process too
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { benchTenant, call, load, ROOT, runBench, startProcess, UNCAPPED } from './lib';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const TOP = Number(process.env.BENCH_TOP ?? 25);
const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 50);
const ROUTES = (process.env.BENCH_ROUTES ?? 'list,create').split(',');

interface CpuProfile {
  nodes: Array<{ id: number; callFrame: { functionName: string; url: string }; children?: number[] }>;
  samples: number[];
  timeDeltas: number[];
}

function ask(proc: ChildProcess, message: object, answer: string): Promise<void> {
  return new Promise((ok) => {
    const on = (m: { type?: string }) => {
      if (m?.type !== answer) return;
      proc.off('message', on);
      ok();
    };
    proc.on('message', on);
    proc.send(message);
  });
}

/** A module's name from a profile frame's URL: the package, the repository path, or the V8 pseudo-frame. */
function moduleOf(url: string, fn: string): string {
  if (!url) return fn || '(unknown)';
  const pkg = url.split('node_modules/').pop()!;
  if (pkg !== url) return pkg.startsWith('@') ? pkg.split('/').slice(0, 2).join('/') : pkg.split('/')[0];
  return url.replace(/^file:\/\//, '').replace(`${ROOT}/`, '');
}

/** The layer a module belongs to, for the per-layer attribution. */
const LAYERS: Array<[string, RegExp]> = [
  ['GC', /^\(garbage collector\)$/],
  ['V8 (compiler, inline caches, runtime)', /^\((program|unknown)\)$/],
  [
    'Fastify (routing, hooks, validation, serialisation)',
    /^(fastify|find-my-way|avvio|fast-json-stringify|ajv|@fastify\/.*|fast-uri|fast-querystring|light-my-request|toad-cache|process-warning|abstract-logging|@sinclair\/typebox|secure-json-parse|fast-decode-uri-component|rfdc|json-schema-ref-resolver|helmet)$/,
  ],
  ['gateway: auth, policy, rate limit', /^gateway\/src\/(plugins|lib\/(credentials|policy|rate-limiter|principal|revocations))/],
  ['gateway: routes, views, envelope', /^gateway\/src\//],
  ['grpc-js (client and server, HTTP/2 framing)', /^@grpc\//],
  ['proto encode/decode', /^(packages\/proto|protobufjs|@bufbuild\/.*|long)/],
  ['kit: gRPC wrappers, auth claims', /^packages\/kit\/src\/(grpc|jwt|service|errors)/],
  ['kit: store (SQLite adapter) and better-sqlite3', /^(packages\/kit\/src\/storage|better-sqlite3|bindings)/],
  ['kit: outbox, feed, events, caps', /^packages\/kit\/src\/(events|feed|caps|outbox)/],
  ['metrics (prom-client)', /^(prom-client|packages\/kit\/src\/metrics|tdigest|bintrees)/],
  [
    'logging (pino)',
    /^(pino|pino-std-serializers|sonic-boom|thread-stream|fast-redact|quick-format-unescaped|atomic-sleep|on-exit-leak-free)/,
  ],
  ['services (handlers, views)', /^services\//],
  ['other kit', /^packages\/kit\//],
  ['Node internals (net, http, http2, streams, timers)', /^node:/],
];
const layerOf = (module: string) => LAYERS.find(([, re]) => re.test(module))?.[0] ?? 'other';

/**
 * Self time per module, in µs per request. A native function (no URL: better-sqlite3's `run`, `all`, a socket's
 * `writev`) counts for the module that called it, marked "(native)"; the profiler's own work of stopping (under
 * node:inspector) is left out.
 */
function perRequest(file: string, requests: number): Map<string, number> {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const memo = new Map<number, string | null>();
  const nameOf = (id: number): string | null => {
    if (memo.has(id)) return memo.get(id)!;
    const { functionName, url } = byId.get(id)!.callFrame;
    let name: string | null;
    if (url === 'node:inspector') name = null;
    else if (url) name = moduleOf(url, functionName);
    else if (functionName.startsWith('(') || !parent.has(id)) name = functionName || '(unknown)';
    else {
      const caller = nameOf(parent.get(id)!);
      name = caller === null ? null : `${caller.replace(/ \(native\)$/, '')} (native)`;
    }
    memo.set(id, name);
    return name;
  };
  const out = new Map<string, number>();
  profile.samples.forEach((id, i) => {
    const mod = nameOf(id);
    if (mod !== null) out.set(mod, (out.get(mod) ?? 0) + profile.timeDeltas[i] / requests);
  });
  out.delete('(idle)');
  return out;
}

const total = (m: Map<string, number>) => [...m.values()].reduce((sum, v) => sum + v, 0);

function byLayer(m: Map<string, number>): Map<string, number> {
  const out = new Map<string, number>();
  for (const [k, v] of m) out.set(layerOf(k), (out.get(layerOf(k)) ?? 0) + v);
  return out;
}

interface Target {
  url: string;
  method?: string;
  body?: string;
  headers: Record<string, string>;
}

async function measure(name: string, proc: ChildProcess, target: Target, dir: string) {
  const options = { connections: CLIENTS, headers: target.headers, method: target.method, body: target.body };
  await load(target.url, { ...options, seconds: 3 }); // warm-up
  const file = join(dir, `${name}-${Date.now()}.cpuprofile`);
  await ask(proc, { type: 'profile-start' }, 'profile-started');
  const r = await load(target.url, { ...options, seconds: SECONDS });
  await ask(proc, { type: 'profile-stop', file }, 'profile-written');
  if (r.errors || r.non2xx) throw new Error(`${name}: ${r.errors} errors, ${r.non2xx} non-2xx answers`);
  console.log(`${name.padEnd(9)} ${Math.round(r.rps)} req/s, ${r.requests} requests profiled`);
  return perRequest(file, r.requests);
}

function table(title: string, a: Map<string, number>, b: Map<string, number>, top: number) {
  const rows = [...new Set([...a.keys(), ...b.keys()])]
    .map((k) => ({ key: k, baseline: a.get(k) ?? 0, system: b.get(k) ?? 0 }))
    .sort((x, y) => y.system - y.baseline - (x.system - x.baseline));
  console.log(`\n   +µs  baseline    system  ${title}`);
  for (const r of rows.slice(0, top))
    console.log(
      `${(r.system - r.baseline).toFixed(1).padStart(6)}  ${r.baseline.toFixed(1).padStart(8)}  ${r.system.toFixed(1).padStart(8)}  ${r.key}`,
    );
}

async function main() {
  const dir = mkdtempSync(join(tmpdir(), 'svc-profile-'));
  const baseline = await startProcess('bench/fixtures/fastify-grpc-one-process.ts');
  const system = await startProcess('bench/fixtures/system-one-process.ts', {
    DATA_DIR: dir,
    SERVICES: ROUTES.includes('openai') ? 'identity,projects,billing,agents,chat' : 'identity,projects,billing',
    ...UNCAPPED,
    EGRESS_ALLOW_PRIVATE: 'true',
    BILLING_STARTING_GRANT: '1000000000',
  });
  const llm = ROUTES.includes('openai') ? await startProcess('bench/fixtures/fake-llm.ts') : undefined;
  const base = `http://127.0.0.1:${system.port}/api/v1`;
  const tenant = async () => {
    const { accessToken, apiKey } = await benchTenant(base);
    return { token: accessToken, headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' } };
  };
  const lister = await tenant();
  const writer = await tenant();
  if (llm)
    await call(base, 'PATCH', '/tenant/settings/llm', writer.token, {
      provider: 'openai',
      model: 'gpt-bench',
      baseUrl: `http://127.0.0.1:${llm.port}/v1`,
      apiKey: 'sk-bench',
    });
  let last = '';
  for (let i = 0; i < 201; i++) last = (await call(base, 'POST', '/projects', lister.token, { name: `project ${i}` })).id;
  const targets: Record<string, Target> = {
    list: { url: `${base}/projects?limit=20`, headers: lister.headers },
    create: {
      url: `${base}/projects`,
      method: 'POST',
      body: JSON.stringify({ name: 'profiled', description: 'a project' }),
      headers: writer.headers,
    },
    update: { url: `${base}/projects/${last}`, method: 'PATCH', body: JSON.stringify({ description: 'changed' }), headers: lister.headers },
    get: { url: `${base}/projects/${last}`, headers: lister.headers },
    tenant: { url: `${base}/tenant`, headers: lister.headers },
    me: { url: `${base}/auth/me`, headers: { authorization: `Bearer ${lister.token}` } },
    openai: {
      url: `${base.replace(/\/api\/v1$/, '')}/v1/chat/completions`,
      method: 'POST',
      body: JSON.stringify({ model: 'gpt-bench', messages: [{ role: 'user', content: 'load probe' }] }),
      headers: writer.headers,
    },
  };
  // The baseline answers the list with a constant page of 20 projects (the same payload), everything else with the
  // tenant: a list's distance from its baseline is what the system adds, apart from the size of the answer.
  const baselines = new Map<string, Map<string, number>>();
  const baselineOf = async (path: string) => {
    if (!baselines.has(path))
      baselines.set(
        path,
        await measure('baseline', baseline.proc, { url: `http://127.0.0.1:${baseline.port}/api/v1${path}`, headers: {} }, dir),
      );
    return baselines.get(path)!;
  };
  for (const route of ROUTES) {
    const target = targets[route];
    if (!target) throw new Error(`unknown route ${route}; known: ${Object.keys(targets).join(', ')}`);
    console.log(`\n=== ${route}: ${target.method ?? 'GET'} ${target.url.replace(base, '/api/v1')}`);
    const a = await baselineOf(route === 'list' ? '/projects' : '/tenant');
    const b = await measure(route, system.proc, target, dir);
    console.log(`CPU µs per request (idle left out): baseline ${total(a).toFixed(0)}, system ${total(b).toFixed(0)}`);
    table('layer', byLayer(a), byLayer(b), LAYERS.length + 1);
    table('module', a, b, TOP);
  }
  console.log(`\nprofiles in ${dir} (open them in Chrome DevTools, Performance tab)`);
}

runBench(main);
