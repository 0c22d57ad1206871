/**
 * The SDK and the CLI as a user outside this repository gets them: `npm pack` in each package folder (as `npm publish`
 * does: `prepack` builds dist/) writes both tarballs, npm installs them into a fresh folder outside the repository
 * (their npm dependencies from the registry), and plain
 * JavaScript uses them against the running system: an ES module and a CommonJS script list projects and stream a chat
 * reply, `npx svc whoami` runs the installed CLI, a bundler builds the browser entry for browsers, and TypeScript
 * type-checks against the shipped declarations in both module systems. No TypeScript runs: the packages hold none.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import * as esbuild from 'esbuild';
import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { SvcClient } from '@svc/sdk';
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

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'svc-packaging-'));
  app = join(work, 'app');
  expect(relative(ROOT, app).startsWith('..')).toBe(true); // outside the repository: no workspace, no node_modules above
  // `npm pack` in each folder, the SDK first (the CLI's declarations are checked against its source), while the stack starts.
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
      tarballs = { sdk: await pack('packages/sdk'), cli: await pack('packages/cli') };
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
    `import { SvcClient, ApiError, type Output } from '@svc/sdk';
const svc = new SvcClient({ baseUrl: 'http://localhost:8080', apiKey: 'k' });
const projects: Output<'listProjects'> = await svc.listProjects({ query: { limit: 10 } });
export const names: string[] = projects.map((p) => p.name);
for await (const e of svc.streamChatReply('ses_1')) if (e.type === 'delta') console.log(e.delta.length);
export const isError = (e: unknown) => e instanceof ApiError && e.status >= 400;
`,
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
  const checked = await tsc(['typed.mts', 'typed.cts', 'wrong.mts']);
  expect(checked.code).not.toBe(0);
  const errors = checked.stdout.split('\n').filter((line) => /error TS\d+/.test(line));
  expect(errors).toEqual([expect.stringMatching(/^wrong\.mts\(2,\d+\): error TS2322: Type 'string' is not assignable to type 'number'/)]);
});
