/**
 * The SDK and the CLI as a user outside this repository gets them: `npm pack` in each package folder (as `npm publish`
 * does: `prepack` builds dist/) writes both tarballs, npm installs them into a fresh folder outside the repository
 * (their npm dependencies from the registry), and plain
 * JavaScript uses them against the running system: an ES module and a CommonJS script list projects and stream a chat
 * reply, `npx svc whoami` runs the installed CLI, a bundler builds the browser entry for browsers, TypeScript
 * type-checks against the shipped declarations in both module systems, and a script uses the resources through a
 * proxy that injects faults (errors, a hang, a 503 before an agent run, a chat stream and a /v1 response cut mid-reply). The installed
 * `svc` has the source's whole command tree, lists each resource as JSON, and its `listen --forward-to` delivers a
 * `project.created` that the `standardwebhooks` package verifies. No TypeScript runs: the packages hold none.
 */
import { execFile } from 'node:child_process';
import { createServer, request as httpRequest, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import * as esbuild from 'esbuild';
import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { SvcClient } from '@svc/sdk';
import { buildProgram } from '@svc/cli';
import { Webhook } from 'standardwebhooks';
import { leafCommands, startCli } from '../helpers/cli';
import { eventually } from '../helpers/http';
import { startReceiver } from '../helpers/receiver';
import { startStack, type Stack } from '../helpers/stack';

jest.setTimeout(150_000);

const ROOT = resolve(__dirname, '../..');
const VERSION: string = JSON.parse(readFileSync(join(ROOT, 'packages/sdk/package.json'), 'utf8')).version;

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}
function run(cmd: string, args: string[], opts: { cwd: string; env?: Record<string, string>; timeoutMs?: number }): Promise<Run> {
  return new Promise((done) => {
    execFile(
      cmd,
      args,
      {
        cwd: opts.cwd,
        env: { PATH: process.env.PATH, HOME: process.env.HOME, ...opts.env },
        timeout: opts.timeoutMs ?? 60_000,
        maxBuffer: 16 << 20,
      },
      (err, stdout, stderr) => done({ code: err ? Number((err as { code?: unknown }).code ?? 1) || 1 : 0, stdout, stderr }),
    );
  });
}
const ok = (r: Run) => {
  if (r.code !== 0) throw new Error(`exit ${r.code}\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
};

/** Every file under a folder, relative to it. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((f) => statSync(join(dir, f)).isFile());
}

/** Every file a manifest names as an entry point (main, module, types, exports, bin). */
function entryPoints(manifest: Record<string, any>): string[] {
  const found: string[] = [];
  const walk = (v: unknown): void => {
    if (typeof v === 'string') found.push(v);
    else if (v && typeof v === 'object') Object.values(v).forEach(walk);
  };
  walk([manifest.main, manifest.module, manifest.types, manifest.exports, manifest.bin]);
  return [...new Set(found.filter(Boolean))];
}

let stack: Stack;
let llm: FakeProviderServer;
let work: string;
let app: string;
let tarballs: Record<'sdk' | 'cli', { name: string; version: string; file: string; files: string[] }>;
let env: Record<string, string>;
let email: string;

/**
 * A proxy in front of the gateway that does what a header `x-test-fault` asks: a status (answered with the error
 * envelope, not forwarded), `hang` (never answers), `503-once` (the first time an Idempotency-Key is seen, the request is
 * forwarded and done, and its answer replaced by a 503: the retry must not do the work again), `cut-stream...` (forwards the first stream with that value up to the end of its first delta event, then resets).
 */
async function startFaultProxy(target: string) {
  const seen: Array<{ method: string; url: string; headers: IncomingHttpHeaders }> = [];
  const done = new Set<string>();
  const server: Server = createServer((req, res) => {
    seen.push({ method: req.method!, url: req.url!, headers: req.headers });
    const fault = String(req.headers['x-test-fault'] ?? '');
    const once = (key: string) => !done.has(key) && Boolean(done.add(key));
    const fail = (status: number) =>
      res
        .writeHead(status, { 'content-type': 'application/json', 'x-request-id': `req-fault-${status}`, 'retry-after': '0' })
        .end(JSON.stringify({ error: { code: `FAULT_${status}`, message: 'injected', details: { status } }, meta: {} }));
    if (/^\d{3}$/.test(fault)) return fail(Number(fault));
    if (fault === 'hang') return;
    const lose = fault === '503-once' && once(`503:${req.headers['idempotency-key']}`);
    // Once per fault value: the resumed stream (same header, another URL for /v1) goes through.
    const cut = fault.startsWith('cut-stream') && once(`cut:${fault}`);
    const upstream = httpRequest(`${target}${req.url}`, { method: req.method, headers: req.headers }, (up) => {
      // The work was done; the answer is lost on the way back.
      if (lose) return void up.resume().on('end', () => fail(503));
      res.writeHead(up.statusCode!, up.headers);
      if (!cut) return void up.pipe(res);
      let text = '';
      let cutDone = false;
      up.on('data', (chunk: Buffer) => {
        if (cutDone) return;
        text += chunk.toString('utf8');
        const delta = text.search(/event: [\w.]*delta\n/);
        const end = delta >= 0 ? text.indexOf('\n\n', delta) : -1;
        if (end < 0) return;
        cutDone = true;
        res.write(text.slice(0, end + 2), () => res.socket?.destroy());
        up.destroy();
      });
    });
    upstream.on('error', () => res.socket?.destroy());
    req.pipe(upstream);
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    close: () => new Promise<void>((ok) => (server.closeAllConnections(), server.close(() => ok()))),
  };
}

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'svc-packaging-'));
  app = join(work, 'app');
  expect(relative(ROOT, app).startsWith('..')).toBe(true); // outside the repository: no workspace, no node_modules above
  // `npm pack` in each folder, both at once (the CLI's build reads the SDK's source, not its dist/), while the stack starts.
  const release = join(work, 'release');
  mkdirSync(release);
  const pack = async (dir: string) => {
    const out = ok(await run('npm', ['pack', '--json', '--pack-destination', release], { cwd: join(ROOT, dir), timeoutMs: 90_000 }));
    // npm prints the prepack script's output before the JSON.
    const [packed] = JSON.parse(out.slice(out.indexOf('[\n')));
    return {
      name: packed.name,
      version: packed.version,
      file: join(release, packed.filename),
      files: packed.files.map((f: { path: string }) => f.path),
    };
  };
  await Promise.all([
    (async () => {
      const [sdk, cli] = await Promise.all([pack('packages/sdk'), pack('packages/cli')]);
      tarballs = { sdk, cli };
    })(),
    (async () => {
      llm = await startFakeOpenAI({ apiKey: 'sk-pack' });
      stack = await startStack();
    })(),
  ]);

  // A fresh project that installs both tarballs, as a user would.
  mkdirSync(app);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'svc-consumer', version: '1.0.0', private: true }));
  ok(
    await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', tarballs.sdk.file, tarballs.cli.file], {
      cwd: app,
      timeoutMs: 90_000,
    }),
  );

  // An account with a model and a project, and an API key for the scripts and the CLI.
  email = `pack-${Date.now()}@example.com`;
  const anon = new SvcClient({ baseUrl: stack.url });
  await anon.register({ body: { email, password: 'correct horse battery', name: 'Pack', tenantName: 'Pack Co' } });
  const login = await anon.login({ body: { email, password: 'correct horse battery' } });
  const owner = new SvcClient({ baseUrl: stack.url, token: { accessToken: login.accessToken } });
  await owner.updateLlmSettings({ body: { provider: 'openai', model: 'gpt-fake', baseUrl: llm.url, apiKey: 'sk-pack' } });
  await owner.createProject({ body: { name: 'Packed project' } });
  const key = await owner.createApiKey({ body: { name: 'pack', type: 'sdk', environment: 'development' } });
  env = { SVC_BASE_URL: stack.url, SVC_API_KEY: key.key, XDG_CONFIG_HOME: join(work, 'config') };
}, 150_000);

afterAll(async () => {
  await stack?.stop();
  await llm?.close();
  if (work) rmSync(work, { recursive: true, force: true });
});

it('packs both packages: JavaScript and declarations, no TypeScript source, entry points in dist/', () => {
  expect(tarballs.sdk).toMatchObject({ name: '@svc/sdk', version: VERSION });
  expect(tarballs.cli).toMatchObject({ name: '@svc/cli', version: VERSION });
  for (const t of Object.values(tarballs)) {
    expect(t.files).toEqual(expect.arrayContaining(['package.json', 'README.md']));
    expect(t.files.filter((f) => f.endsWith('.ts') && !/\.d\.(m|c)?ts$/.test(f))).toEqual([]);
  }
  expect(tarballs.sdk.files).toEqual(
    expect.arrayContaining(['dist/index.mjs', 'dist/index.cjs', 'dist/browser.mjs', 'dist/types/index.d.ts', 'dist/index.d.mts']),
  );
  expect(tarballs.cli.files).toEqual(expect.arrayContaining(['dist/svc.cjs', 'dist/index.cjs', 'dist/types/index.d.ts']));
  expect(tarballs.cli.files.filter((f) => !f.startsWith('dist/'))).toEqual(expect.arrayContaining(['package.json', 'README.md']));

  const sdk = JSON.parse(readFileSync(join(app, 'node_modules/@svc/sdk/package.json'), 'utf8'));
  const cli = JSON.parse(readFileSync(join(app, 'node_modules/@svc/cli/package.json'), 'utf8'));
  expect(sdk).toMatchObject({ version: VERSION, license: expect.any(String), files: expect.any(Array) });
  // Publishable as it is (npm publish refuses a private package), every entry point built.
  expect([sdk.private, cli.private]).toEqual([undefined, undefined]);
  expect(sdk.exports['.']).toMatchObject({
    import: { types: './dist/index.d.mts', default: './dist/index.mjs' },
    require: { types: './dist/types/index.d.ts', default: './dist/index.cjs' },
  });
  for (const [name, manifest] of [
    ['sdk', sdk],
    ['cli', cli],
  ])
    for (const target of entryPoints(manifest))
      expect([name, target, existsSync(join(app, 'node_modules/@svc', name, target))]).toEqual([name, target, true]);
  // One runtime dependency: the SSE parser the whole repository shares (browser-safe, no dependencies of its own).
  expect(sdk.dependencies ?? {}).toEqual({ 'eventsource-parser': '3.1.1' });
  expect(cli).toMatchObject({ version: VERSION, bin: { svc: 'bin/svc.js' }, dependencies: { '@svc/sdk': VERSION } });
  // The CLI's library entry (run, buildProgram) is CommonJS, for import and require alike.
  const cliEntry = { types: './dist/types/index.d.ts', default: './dist/index.cjs' };
  expect(cli.exports['.']).toEqual({ import: cliEntry, require: cliEntry });
  // One SDK, the installed tarball, serves the app and the CLI; no TypeScript runner came along.
  expect(existsSync(join(app, 'node_modules/@svc/cli/node_modules/@svc/sdk'))).toBe(false);
  expect(existsSync(join(app, 'node_modules/tsx'))).toBe(false);
  expect(existsSync(join(app, 'node_modules/typescript'))).toBe(false);
  const installed = [...filesUnder(join(app, 'node_modules/@svc/sdk')), ...filesUnder(join(app, 'node_modules/@svc/cli'))];
  expect(installed.filter((f) => f.endsWith('.ts') && !/\.d\.(m|c)?ts$/.test(f))).toEqual([]);
});

it('an ES module script lists projects and streams a chat reply', async () => {
  writeFileSync(
    join(app, 'chat.mjs'),
    `import { SvcClient } from '@svc/sdk';
const svc = new SvcClient({ baseUrl: process.env.SVC_BASE_URL, apiKey: process.env.SVC_API_KEY });
const projects = await svc.listProjects();
const session = await svc.createChatSession({ body: { title: 'esm' } });
await svc.sendChatMessage({ params: { id: session.id }, body: { content: 'Hi!' } });
let reply = '';
for await (const e of svc.streamChatReply(session.id)) if (e.type === 'delta') reply += e.delta;
console.log(JSON.stringify({ projects: projects.map((p) => p.name), reply, entry: import.meta.resolve('@svc/sdk') }));
`,
  );
  llm.script({ type: 'text', text: 'hello from ESM', chunks: 3 });
  const out = JSON.parse(ok(await run(process.execPath, ['chat.mjs'], { cwd: app, env })));
  expect(out).toEqual({
    projects: ['Packed project'],
    reply: 'hello from ESM',
    entry: expect.stringMatching(/node_modules\/@svc\/sdk\/dist\/index\.mjs$/),
  });
});

it('a CommonJS script lists projects and streams a chat reply', async () => {
  writeFileSync(
    join(app, 'chat.cjs'),
    `const { SvcClient, ApiError } = require('@svc/sdk');
async function main() {
  const svc = new SvcClient({ baseUrl: process.env.SVC_BASE_URL, apiKey: process.env.SVC_API_KEY });
  const projects = await svc.listProjects();
  const session = await svc.createChatSession({ body: { title: 'cjs' } });
  await svc.sendChatMessage({ params: { id: session.id }, body: { content: 'Hi!' } });
  let reply = '';
  for await (const e of svc.streamChatReply(session.id)) if (e.type === 'delta') reply += e.delta;
  const missing = await svc.getProject({ params: { id: 'prj_missing' } }).catch((e) => e);
  console.log(JSON.stringify({ projects: projects.map((p) => p.name), reply, error: missing instanceof ApiError ? missing.status : null, entry: require.resolve('@svc/sdk') }));
}
main();
`,
  );
  llm.script({ type: 'text', text: 'hello from CommonJS', chunks: 2 });
  const out = JSON.parse(ok(await run(process.execPath, ['chat.cjs'], { cwd: app, env })));
  expect(out).toEqual({
    projects: ['Packed project'],
    reply: 'hello from CommonJS',
    error: 404,
    entry: expect.stringMatching(/node_modules\/@svc\/sdk\/dist\/index\.cjs$/),
  });
});

it('npx svc runs the installed CLI: whoami, its version, svc api, and its completion script loads in bash', async () => {
  const me = JSON.parse(ok(await run('npx', ['--no', '--', 'svc', 'whoami', '--json'], { cwd: app, env })));
  expect(me).toMatchObject({ user: { email }, tenant: { name: 'Pack Co' }, credential: { type: 'api_key' } });
  expect(ok(await run('npx', ['--no', '--', 'svc', '--version'], { cwd: app, env })).trim()).toBe(VERSION);
  const projects = JSON.parse(ok(await run('npx', ['--no', '--', 'svc', 'projects', '--json'], { cwd: app, env })));
  expect(projects.map((p: { name: string }) => p.name)).toEqual(['Packed project']);
  const raw = JSON.parse(ok(await run('npx', ['--no', '--', 'svc', 'api', 'GET', '/projects'], { cwd: app, env })));
  expect(raw).toMatchObject({ data: [{ name: 'Packed project' }], meta: { pagination: { has_more: false } } });
  const esm = `import { run, buildProgram } from '@svc/cli'; console.log(typeof run, buildProgram({}).name());`;
  expect(ok(await run(process.execPath, ['--input-type=module', '-e', esm], { cwd: app })).trim()).toBe('function svc');
  const completion = ok(await run('bash', ['-c', 'source <(npx --no -- svc completion bash) && complete -p svc'], { cwd: app, env }));
  expect(completion.trim()).toBe('complete -F _svc svc');
});

it('a bundler builds the browser entry for browsers, with no Node built-in', async () => {
  writeFileSync(
    join(app, 'web.mjs'),
    `import { SvcClient } from '@svc/sdk';
import { SvcClient as FromSubpath } from '@svc/sdk/browser';
const svc = new SvcClient({ baseUrl: location.origin });
export const same = SvcClient === FromSubpath;
export const list = () => svc.listProjects();
`,
  );
  const result = await esbuild.build({
    absWorkingDir: app,
    entryPoints: ['web.mjs'],
    bundle: true,
    platform: 'browser',
    format: 'esm',
    target: ['chrome120', 'firefox120', 'safari17'],
    write: false,
    metafile: true,
    logLevel: 'silent',
  });
  expect(result.errors).toEqual([]);
  // The `browser` condition picked the browser build, for the package and for its /browser subpath alike.
  expect(Object.keys(result.metafile.inputs).sort()).toEqual(['node_modules/@svc/sdk/dist/browser.mjs', 'web.mjs']);
  const code = result.outputFiles[0].text;
  expect(code).not.toMatch(/\brequire\(|from ["']node:|import\(["']node:/);
  expect(code).toMatch(/SvcClient = class extends GeneratedMethods/);
  // And a Node built-in would have failed it: the same build of a module that imports one.
  writeFileSync(join(app, 'bad.mjs'), `import { readFileSync } from 'node:fs';\nexport const f = readFileSync;\n`);
  await expect(
    esbuild.build({ absWorkingDir: app, entryPoints: ['bad.mjs'], bundle: true, platform: 'browser', write: false, logLevel: 'silent' }),
  ).rejects.toThrow(/node:fs/);
});

it('TypeScript checks against the shipped declarations, as an ES module and as CommonJS', async () => {
  writeFileSync(
    join(app, 'typed.mts'),
    `import { SvcClient, ApiError, NotFoundError, type Output, type Project, type AgentRun, type Page } from '@svc/sdk';
const svc = new SvcClient({ baseUrl: 'http://localhost:8080', apiKey: 'k', timeout: 5000, maxRetries: 3 });
const projects: Output<'listProjects'> = await svc.listProjects({ query: { limit: 10 } });
export const names: string[] = projects.map((p) => p.name);
const created: Project = await svc.projects.create({ name: 'typed' }, { idempotencyKey: 'k-1', timeout: 1000 });
for await (const p of svc.projects.list({ limit: 100 })) console.log(p.name.length, created.id);
const page: Page<Project> = await svc.projects.list().page();
const run: AgentRun = await svc.agents.runs.create('agt_1', { goal: 'g', projectId: page.data[0].id });
export const status: string = run.status;
export const missing = (e: unknown) => e instanceof NotFoundError && e.requestId;
for await (const e of svc.streamChatReply('ses_1')) if (e.type === 'delta') console.log(e.delta.length);
export const isError = (e: unknown) => e instanceof ApiError && e.status >= 400;
`,
  );
  writeFileSync(
    join(app, 'typed-cli.mts'),
    `import { run, buildProgram } from '@svc/cli';\nexport const code: Promise<number> = run(['node', 'svc', 'whoami'], {});\nexport const tree = buildProgram({}).commands.length;\n`,
  );
  writeFileSync(
    join(app, 'typed.cts'),
    `import { SvcClient } from '@svc/sdk';
import { run } from '@svc/cli';
export const code: Promise<number> = run(['node', 'svc', 'whoami'], {});
export const ids = new SvcClient({ baseUrl: 'http://localhost:8080' }).listProjects().then((ps) => ps.map((p) => p.id));
`,
  );
  // A wrong use must fail: the declarations are real types, not `any`.
  writeFileSync(
    join(app, 'wrong.mts'),
    `import { SvcClient } from '@svc/sdk';\nexport const n: number = (await new SvcClient({ baseUrl: '/' }).listProjects())[0].name;\n`,
  );
  const tsc = (files: string[]) =>
    run(
      process.execPath,
      [
        join(ROOT, 'node_modules/typescript/bin/tsc'),
        '--noEmit',
        '--strict',
        '--module',
        'node16',
        '--target',
        'es2022',
        '--lib',
        'es2023,dom',
        '--types',
        'node',
        '--typeRoots',
        join(ROOT, 'node_modules/@types'),
        ...files,
      ],
      { cwd: app, timeoutMs: 90_000 },
    );
  // One compiler run (it is the slow part): the right files check clean, the wrong one fails where it should.
  const checked = await tsc(['typed.mts', 'typed-cli.mts', 'typed.cts', 'wrong.mts']);
  expect(checked.code).not.toBe(0);
  const errors = checked.stdout.split('\n').filter((line) => /error TS\d+/.test(line));
  expect(errors).toEqual([expect.stringMatching(/^wrong\.mts\(2,\d+\): error TS2322: Type 'string' is not assignable to type 'number'/)]);
});

it('the resources from the package, through faults: pages of 250 projects, every error class, a timeout, a 503 that does not run twice, a resumed chat stream and /v1 response', async () => {
  // A tenant of its own (the scripts above see one project): an agent, a full key and a read-only one.
  const anon = new SvcClient({ baseUrl: stack.url });
  const owner = `res-${Date.now()}@example.com`;
  await anon.auth.register({ email: owner, password: 'correct horse battery', name: 'Res', tenantName: 'Res Co' });
  const { accessToken } = await anon.auth.login({ email: owner, password: 'correct horse battery' });
  const admin = new SvcClient({ baseUrl: stack.url, token: { accessToken } });
  await admin.tenant.settings.llm.update({ provider: 'openai', model: 'gpt-fake', baseUrl: llm.url, apiKey: 'sk-pack' });
  const agent = await admin.agents.create({ name: 'res', systemPrompt: 'Be brief.', config: { autonomyLevel: 'manual' } });
  const full = await admin.apiKeys.create({ name: 'res', type: 'sdk', environment: 'development' });
  const readOnly = await admin.apiKeys.create({ name: 'ro', type: 'sdk', environment: 'development', scopes: ['projects:read'] });
  const proxy = await startFaultProxy(stack.url);
  try {
    writeFileSync(
      join(app, 'resources.mjs'),
      `import { SvcClient, SvcError, APITimeoutError } from '@svc/sdk';
const { PROXY, KEY, READ_ONLY, AGENT } = process.env;
const svc = new SvcClient({ baseUrl: PROXY, apiKey: KEY });
const out = {};
// 250 projects, then every one of them through the pages (100 a page), and one page alone.
for (let i = 0; i < 250; i += 25)
  await Promise.all(Array.from({ length: 25 }, (_, j) => svc.projects.create({ name: 'p' + (i + j) })));
const ids = [];
for await (const p of svc.projects.list({ limit: 100 })) ids.push(p.id);
const page = await svc.projects.list({ limit: 100 }).page();
out.pages = { items: ids.length, unique: new Set(ids).size, first: page.data.length, hasMore: page.hasMore };
const p = await svc.projects.retrieve(ids[0]);
out.updated = (await svc.projects.update(p.id, { description: 'from the package' })).description;
out.deleted = await svc.projects.del(p.id);
// Every error class: the gateway's own errors, and the proxy's.
const errorOf = (promise) => promise.then(() => null, (e) => ({ name: e.name, svc: e instanceof SvcError, status: e.status ?? null, code: e.code, requestId: e.requestId }));
const fault = (status) => ({ maxRetries: 0, headers: { 'x-test-fault': status } });
await svc.secrets.create({ name: 'DUP', value: 'x' });
out.errors = [
  await errorOf(svc.projects.create({ name: '' })),
  await errorOf(new SvcClient({ baseUrl: PROXY, apiKey: 'svc_sdk_not_a_key' }).projects.list().page()),
  await errorOf(svc.tenant.retrieve(fault('402'))),
  await errorOf(new SvcClient({ baseUrl: PROXY, apiKey: READ_ONLY }).projects.create({ name: 'no' })),
  await errorOf(svc.projects.retrieve('prj_missing')),
  await errorOf(svc.secrets.create({ name: 'DUP', value: 'y' })),
  await errorOf(svc.tenant.retrieve(fault('422'))),
  await errorOf(svc.tenant.retrieve(fault('429'))),
  await errorOf(svc.tenant.retrieve(fault('500'))),
  await errorOf(svc.tenant.retrieve(fault('503'))),
  await errorOf(new SvcClient({ baseUrl: 'http://127.0.0.1:9', apiKey: KEY, maxRetries: 0 }).tenant.retrieve()),
];
const timedOut = await svc.tenant.retrieve({ timeout: 300, maxRetries: 0, headers: { 'x-test-fault': 'hang' } }).catch((e) => e);
out.timeout = { name: timedOut.name, timeout: timedOut instanceof APITimeoutError, code: timedOut.code, status: timedOut.status ?? null };
// An agent run whose first POST meets a 503: retried with the same Idempotency-Key, one run.
const project = await svc.projects.create({ name: 'for the run' });
const run = await svc.agents.runs.create(AGENT, { goal: 'say hi', projectId: project.id }, { headers: { 'x-test-fault': '503-once' } });
let status = run.status;
while (!['completed', 'failed', 'cancelled'].includes(status)) {
  await new Promise((r) => setTimeout(r, 50));
  status = (await svc.agents.runs.retrieve(AGENT, run.id)).status;
}
const runs = [];
for await (const r of svc.agents.runs.list(AGENT)) runs.push(r.id);
out.runs = { runs, run: run.id, status };
// A chat reply whose stream is cut after its first delta: resumed after it, nothing lost or repeated.
const session = await svc.chat.sessions.create({ title: 'resume' });
await svc.chat.sessions.messages.create(session.id, { content: 'one two three four five' });
let reply = '';
let message = null;
for await (const e of svc.chat.sessions.stream(session.id, { headers: { 'x-test-fault': 'cut-stream-chat' } })) {
  if (e.type === 'delta') reply += e.delta;
  if (e.type === 'completed') message = e.message;
}
out.chat = { reply, stored: message?.content, session: session.id };
// A /v1 response streamed, cut after its first delta: resumed after that event's sequence_number.
const sequence = [];
let text = '';
let completed = null;
for await (const e of svc.v1.responses.stream({ model: 'gpt-fake', input: 'six seven eight nine ten' }, { headers: { 'x-test-fault': 'cut-stream-v1' } })) {
  sequence.push(e.data.sequence_number);
  if (e.event === 'response.output_text.delta') text += e.data.delta;
  if (e.event === 'response.completed') completed = e.data.response;
}
out.v1 = { sequence, text, stored: completed?.output?.[0]?.content?.[0]?.text, id: completed?.id };
console.log(JSON.stringify(out));
`,
    );
    const out = JSON.parse(
      ok(
        await run(process.execPath, ['resources.mjs'], {
          cwd: app,
          env: { PROXY: proxy.url, KEY: full.key, READ_ONLY: readOnly.key, AGENT: agent.id },
        }),
      ),
    );
    expect(out.pages).toEqual({ items: 250, unique: 250, first: 100, hasMore: true });
    expect(out.updated).toBe('from the package');
    expect(out.deleted).toEqual({ id: expect.any(String), deleted: true });
    const requestId = expect.any(String);
    expect(out.errors).toEqual([
      { name: 'BadRequestError', svc: true, status: 400, code: 'VALIDATION_ERROR', requestId },
      { name: 'AuthenticationError', svc: true, status: 401, code: expect.any(String), requestId },
      { name: 'PaymentRequiredError', svc: true, status: 402, code: 'FAULT_402', requestId: 'req-fault-402' },
      { name: 'PermissionDeniedError', svc: true, status: 403, code: expect.any(String), requestId },
      { name: 'NotFoundError', svc: true, status: 404, code: 'RESOURCE_NOT_FOUND', requestId },
      { name: 'ConflictError', svc: true, status: 409, code: 'CONFLICT', requestId },
      { name: 'UnprocessableEntityError', svc: true, status: 422, code: 'FAULT_422', requestId: 'req-fault-422' },
      { name: 'RateLimitError', svc: true, status: 429, code: 'FAULT_429', requestId: 'req-fault-429' },
      { name: 'InternalServerError', svc: true, status: 500, code: 'FAULT_500', requestId: 'req-fault-500' },
      { name: 'InternalServerError', svc: true, status: 503, code: 'FAULT_503', requestId: 'req-fault-503' },
      { name: 'APIConnectionError', svc: true, status: null, code: 'CONNECTION_ERROR', requestId: null },
    ]);
    expect(out.timeout).toEqual({ name: 'APITimeoutError', timeout: true, code: 'TIMEOUT', status: null });
    // Two POSTs reached the proxy with one key; the gateway saw one and made one run.
    const executes = proxy.seen.filter((r) => r.method === 'POST' && r.url.endsWith(`/agents/${agent.id}/execute`));
    expect(executes).toHaveLength(2);
    expect(executes[1].headers['idempotency-key']).toBe(executes[0].headers['idempotency-key']);
    expect(out.runs).toEqual({ runs: [out.runs.run], run: expect.any(String), status: 'completed' });
    // The stream was opened twice, the second time after the first delta's id.
    const streams = proxy.seen.filter((r) => r.url.endsWith(`/chat/sessions/${out.chat.session}/stream`));
    expect(streams).toHaveLength(2);
    expect(streams[0].headers['last-event-id']).toBeUndefined();
    expect(streams[1].headers['last-event-id']).toEqual(expect.any(String));
    expect(out.chat.reply).toBe('Echo: one two three four five');
    expect(out.chat.stored).toBe(out.chat.reply);
    // The /v1 response: one POST, then a resume after the delta that got through; every event once, in order.
    const v1 = proxy.seen.filter((r) => r.url.startsWith('/v1/responses'));
    expect(v1.map((r) => `${r.method} ${r.url.replace(/\?.*/, '')}`)).toEqual(['POST /v1/responses', `GET /v1/responses/${out.v1.id}`]);
    expect(new URL(v1[1].url, proxy.url).searchParams.get('starting_after')).toEqual(expect.stringMatching(/^\d+$/));
    expect(out.v1.sequence).toEqual(out.v1.sequence.map((_: number, i: number) => out.v1.sequence[0] + i));
    expect(out.v1.text).toBe('Echo: six seven eight nine ten');
    expect(out.v1.stored).toBe(out.v1.text);
  } finally {
    await proxy.close();
  }
});

it('the installed svc: the command tree of the source, each resource listed as JSON, and listen forwarding project.created that standardwebhooks verifies', async () => {
  const bin = join(app, 'node_modules/@svc/cli/bin/svc.js');
  // The packed CLI holds every command the source has (test/cli runs each of them with --json).
  writeFileSync(
    join(app, 'tree.cjs'),
    `const { buildProgram } = require('@svc/cli');
const leaves = (c, path = []) => c.commands.flatMap((s) => (s.commands.length ? leaves(s, [...path, s.name()]) : [[...path, s.name()].join(' ')]));
console.log(JSON.stringify(leaves(buildProgram({}))));
`,
  );
  const packedTree = JSON.parse(ok(await run(process.execPath, ['tree.cjs'], { cwd: app })));
  expect(packedTree).toEqual(leafCommands(buildProgram({})));
  expect(packedTree).toHaveLength(new Set(packedTree).size);

  // A tenant of its own, with an API key (events:read included).
  const anon = new SvcClient({ baseUrl: stack.url });
  const owner = `listen-${Date.now()}@example.com`;
  await anon.auth.register({ email: owner, password: 'correct horse battery', name: 'Listen', tenantName: 'Listen Co' });
  const { accessToken } = await anon.auth.login({ email: owner, password: 'correct horse battery' });
  const admin = new SvcClient({ baseUrl: stack.url, token: { accessToken } });
  const { key } = await admin.apiKeys.create({ name: 'listen', type: 'sdk', environment: 'development' });
  const cliEnv = { SVC_BASE_URL: stack.url, SVC_API_KEY: key, XDG_CONFIG_HOME: join(work, 'listen-config') };

  // Each resource's read, as JSON, from the installed command (keys need a user login: test/cli).
  const reads = [
    ['projects', 'list', '--all'],
    ['agents', 'list', '--limit', '5'],
    ['chat', 'sessions', 'list'],
    ['models', 'list'],
    ['webhooks', 'list'],
    ['events', 'list', '--limit', '3'],
    ['events', 'types'],
    ['requests', 'list'],
    ['secrets', 'list'],
    ['usage'],
  ];
  const answers = await Promise.all(reads.map((args) => run(process.execPath, [bin, ...args, '--json'], { cwd: app, env: cliEnv })));
  for (const [i, res] of answers.entries()) {
    expect({ args: reads[i], code: res.code, stderr: res.stderr }).toEqual({ args: reads[i], code: 0, stderr: '' });
    expect([reads[i], JSON.parse(res.stdout)]).toEqual([reads[i], expect.anything()]);
  }

  // svc listen from the package (its bundled signing code), verified as a receiver would: standardwebhooks, no options.
  const receiver = await startReceiver();
  // With --json: one object per line, the session's secret first, then each delivery's status.
  const listen = startCli(['listen', '--forward-to', `${receiver.url}/hook`, '--events', 'project.created', '--json'], cliEnv, bin);
  try {
    const [, secret] = await listen.waitFor(/"secret":"(whsec_[A-Za-z0-9+/=]+)"/);
    const project = await admin.projects.create({ name: 'Heard by the packed svc' });
    await eventually(async () => receiver.at('/hook').length > 0, 20_000);
    const [delivery] = receiver.at('/hook');
    const headers = {
      'webhook-id': String(delivery.headers['webhook-id']),
      'webhook-timestamp': String(delivery.headers['webhook-timestamp']),
      'webhook-signature': String(delivery.headers['webhook-signature']),
    };
    expect(new Webhook(secret).verify(delivery.body, headers)).toMatchObject({ type: 'project.created', data: { id: project.id } });
    expect(() => new Webhook(`whsec_${Buffer.alloc(32, 2).toString('base64')}`).verify(delivery.body, headers)).toThrow();
    await listen.waitFor(/"event":"delivery"/);
  } finally {
    listen.proc.kill('SIGINT');
    await listen.done;
    await receiver.close();
  }
  const { code, stdout } = await listen.done;
  expect(code).toBe(0);
  expect(
    stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as unknown),
  ).toEqual([
    { event: 'ready', forwardTo: `${receiver.url}/hook`, secret: expect.stringMatching(/^whsec_/), types: ['project.created'] },
    {
      event: 'delivery',
      eventId: receiver.requests[0].headers['webhook-id'],
      type: 'project.created',
      status: 200,
      durationMs: expect.any(Number),
    },
  ]);
});
