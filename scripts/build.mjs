/**
 * Compiles each process entry once into `dist/` so that `npm start` (and the Docker image) runs plain JavaScript:
 * no TypeScript transpiler is loaded at run time. Our own code (the workspace packages, `@svc/*`) is bundled per
 * entry; every npm package stays an ordinary `require` from node_modules, so native addons load as usual and
 * OpenTelemetry's instrumentation still patches grpc-js, fastify, ioredis, mongodb and kafkajs when they load.
 *
 * The build is skipped when nothing it reads changed since the last one (a fingerprint of every source file's path,
 * size and mtime, and of the lockfile), so a second `npm start` pays a few milliseconds for it.
 *
 *   node scripts/build.mjs            build if stale
 *   node scripts/build.mjs --force    build anyway
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { isBuiltin, createRequire } from 'node:module';
import { dirname, join, relative, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { buildConsole, CONSOLE_OUT } from './build-console.mjs';
import { buildDocs, DOCS_OUT } from './build-docs.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const OUT = join(ROOT, 'dist');
const STAMP = join(OUT, '.fingerprint');

/** Every `services/<name>/src/main.ts` (the launcher finds them the same way). */
const SERVICES = readdirSync(join(ROOT, 'services')).filter((name) => existsSync(join(ROOT, 'services', name, 'src/main.ts')));

/** dist file (without .js) -> source entry. Per-service bundles sit under dist/services/ so `ps` names them. */
const ENTRIES = {
  start: 'scripts/start.ts',
  gateway: 'gateway/src/main.ts',
  services: 'scripts/services-host.ts',
  // The deployment's topic creation (deploy/helm/svc: the kafka-topics hook Job).
  'kafka-topics': 'scripts/kafka-topics.ts',
  ...Object.fromEntries(SERVICES.map((s) => [`services/${s}`, `services/${s}/src/main.ts`])),
};

const SOURCE_DIRS = ['packages', 'services', 'gateway', 'scripts'];

function sourceFiles(dir, out = []) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    // gateway/public is this build's own output (the console bundle, the API reference's files).
    if (entry.name === 'node_modules' || entry.name === 'dist' || entry.name === 'public' || entry.name.startsWith('.')) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) sourceFiles(path, out);
    else if (/\.(tsx?|js|mjs|json|css)$/.test(entry.name) && !entry.name.endsWith('.test.ts')) out.push(path);
  }
  return out;
}

function fingerprint() {
  const hash = createHash('sha256');
  const files = SOURCE_DIRS.flatMap((d) => sourceFiles(join(ROOT, d)));
  files.push(join(ROOT, 'package-lock.json'));
  for (const file of files.sort()) {
    const s = statSync(file);
    hash.update(`${relative(ROOT, file)}\0${s.size}\0${s.mtimeMs}\n`);
  }
  hash.update(process.version);
  return hash.digest('hex');
}

const require = createRequire(import.meta.url);
const ROOT_MODULES = join(ROOT, 'node_modules');

/**
 * Our workspace packages are bundled; any other bare import stays a require() of node_modules. A package that npm
 * installed in a workspace's own node_modules (another version than the root's) is required by its path relative
 * to the bundle in `outdir`, since the bundle no longer sits in that workspace.
 */
function externalPackages(outdir) {
  return {
    name: 'external-packages',
    setup(build) {
      build.onResolve({ filter: /^[^./]/ }, (args) => {
        if (args.path.startsWith('@svc/')) return undefined;
        if (isBuiltin(args.path)) return { path: args.path, external: true };
        const resolved = require.resolve(args.path, { paths: [args.resolveDir] });
        const at = resolved.lastIndexOf(`${sep}node_modules${sep}`);
        const modules = resolved.slice(0, at + `${sep}node_modules`.length);
        if (at < 0 || modules === ROOT_MODULES) return { path: args.path, external: true };
        return { path: `${relative(outdir, modules)}/${args.path}`.split(sep).join('/'), external: true };
      });
    },
  };
}

export async function build({ force = false, quiet = false } = {}) {
  const print = quiet ? () => {} : (msg) => process.stderr.write(`${msg}\n`);
  const current = fingerprint();
  const fresh =
    existsSync(STAMP) &&
    readFileSync(STAMP, 'utf8') === current &&
    existsSync(join(CONSOLE_OUT, 'main.js')) &&
    existsSync(join(DOCS_OUT, 'swagger-ui-bundle.js.br')) &&
    existsSync(join(OUT, 'node-flags.json'));
  if (!force && fresh) return false;
  const started = Date.now();
  const esbuild = await import('esbuild');
  // Everything but the release tarballs (npm run release:pack writes them to dist/release).
  mkdirSync(OUT, { recursive: true });
  for (const entry of readdirSync(OUT)) if (entry !== 'release') rmSync(join(OUT, entry), { recursive: true, force: true });
  // One esbuild run per output folder, so that relative requires are right for every bundle in it.
  const byFolder = new Map();
  for (const entry of Object.entries(ENTRIES)) byFolder.set(dirname(entry[0]), [...(byFolder.get(dirname(entry[0])) ?? []), entry]);
  for (const [folder, entries] of byFolder) {
    const outdir = join(OUT, folder);
    await esbuild.build({
      entryPoints: Object.fromEntries(entries.map(([out, src]) => [relative(folder, out), join(ROOT, src)])),
      outdir,
      bundle: true,
      platform: 'node',
      target: 'node20',
      format: 'cjs',
      sourcemap: 'linked',
      // Stack traces need the mappings, not a copy of every source: Node reads the whole map of each bundle at
      // start-up (--enable-source-maps), and without the sources it is a third of the size.
      sourcesContent: false,
      // No keepNames: it wraps every named function and closure in a defineProperty call each time it is created,
      // about a seventh of the services' CPU on the model-call path (decision 145). Every process runs with
      // --enable-source-maps, whose stack traces take names from the map, so a name esbuild renamed (isSet2) still
      // reads as in the source; classes keep their names unless two bundled ones collide.
      keepNames: false,
      plugins: [externalPackages(outdir)],
      logLevel: 'warning',
    });
  }
  // The gateway's pages read their script and stylesheet next to the code (dist/assets for the bundle).
  cpSync(join(ROOT, 'gateway/src/pages/assets'), join(OUT, 'assets'), { recursive: true });
  // The console's browser bundle and the API reference's files (/docs: Swagger UI and the page's own), compressed
  // here: built into gateway/public (where the gateway finds them when run from source) and copied beside the pages'
  // assets.
  await buildConsole();
  buildDocs();
  cpSync(join(ROOT, 'gateway/public'), join(OUT, 'assets'), { recursive: true });
  writeNodeFlags();
  writeFileSync(STAMP, current);
  print(`build: dist/ compiled in ${Date.now() - started} ms`);
  return true;
}

/**
 * Node flags the launcher gives every part, for the Node that built dist/ (the fingerprint covers its version):
 * V8's `--memory-reducer-single-gc` where this V8 has it (one compaction of an idle heap instead of up to three).
 * Asking `node --v8-options` takes a process start; here it is paid once per build, not on every start-up.
 */
function writeNodeFlags() {
  const flag = '--memory-reducer-single-gc';
  const options = execFileSync(process.execPath, ['--v8-options'], { maxBuffer: 16 * 1024 * 1024 }).toString();
  writeFileSync(join(OUT, 'node-flags.json'), JSON.stringify(options.includes(flag) ? [flag] : []) + '\n');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  build({ force: process.argv.includes('--force'), quiet: process.argv.includes('--quiet') })
    .then(async () => {
      // `npm start`: the launcher runs in this process, rather than paying for a second Node start-up.
      if (!process.argv.includes('--then-start')) return;
      process.setSourceMapsEnabled(true);
      await import(pathToFileURL(join(OUT, 'start.js')).href);
    })
    .catch((err) => {
      process.stderr.write(`build failed: ${err.message}\n`);
      process.exit(1);
    });
}
