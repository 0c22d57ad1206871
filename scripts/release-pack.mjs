#!/usr/bin/env node
/**
 * `npm run release:pack`: builds `@svc/sdk` and `@svc/cli` to plain JavaScript with type declarations and writes
 * their npm tarballs, ready for `npm install ./svc-sdk-X.tgz` or `npm publish ./svc-sdk-X.tgz`.
 *
 *   npm run release:pack                          version of packages/*\/package.json, into dist/release/
 *   npm run release:pack -- --version 1.2.0       stamps 1.2.0 on both (and on the CLI's dependency on the SDK)
 *   npm run release:pack -- --out /tmp/release    another folder
 *
 * In the repository the packages are TypeScript source (their manifests point at src/, so tests, tsx and the
 * bundler use the source, no build step). Each package is staged in a temporary folder: its `files` plus a built
 * dist/, and a manifest with the version stamped, `publishConfig`'s entry points (main, types, exports) applied,
 * and nothing private to the repository (private, scripts, devDependencies). Then `npm pack` packs the stage.
 *
 * - SDK: dist/index.mjs (ESM) and dist/index.cjs (CommonJS), bundled from src/ with esbuild; dist/browser.mjs, the
 *   browser entry, built for platform=browser (esbuild fails on any Node built-in); dist/types/ (tsc declarations,
 *   compiled against the DOM library and no Node types) and dist/index.d.mts for ESM importers. No dependency.
 * - CLI: dist/index.cjs (CommonJS, Node 20) with its npm dependencies (commander, nanospinner, @svc/sdk) left to
 *   npm; bin/svc.js runs it as `svc`; dist/types/ declares `run` and `buildProgram`.
 */
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const TSC = join(ROOT, 'node_modules/typescript/bin/tsc');

function argOf(name) {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
}

const readJson = (path) => JSON.parse(readFileSync(path, 'utf8'));
const SEMVER = /^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$/;

/** The published manifest: the repository's, stamped, with publishConfig's entry points and nothing repo-only. */
function publishedManifest(pkg, version) {
  const manifest = { ...pkg };
  for (const repoOnly of ['private', 'scripts', 'devDependencies', 'publishConfig']) delete manifest[repoOnly];
  const { access, registry, tag, ...entryPoints } = pkg.publishConfig ?? {};
  const dependencies = manifest.dependencies
    ? Object.fromEntries(Object.entries(manifest.dependencies).map(([name, range]) => [name, name.startsWith('@svc/') ? version : range]))
    : undefined;
  return {
    ...manifest,
    version,
    ...entryPoints,
    ...(dependencies ? { dependencies } : {}),
    publishConfig: Object.fromEntries(Object.entries({ access, registry, tag }).filter(([, v]) => v !== undefined)),
  };
}

/** Copies the package's `files` (those that are not built) and README into the stage. */
function stageFiles(pkgDir, pkg, stage) {
  for (const entry of pkg.files ?? []) {
    if (entry === 'dist') continue;
    cpSync(join(pkgDir, entry), join(stage, entry), { recursive: true });
  }
}

/** Declarations with tsc, from a throwaway tsconfig (the repository's settings, the package's entry files). */
function declarations(entries, outDir, compilerOptions) {
  const dir = mkdtempSync(join(tmpdir(), 'svc-dts-'));
  try {
    const config = join(dir, 'tsconfig.json');
    writeFileSync(
      config,
      JSON.stringify({
        extends: join(ROOT, 'tsconfig.base.json'),
        compilerOptions: {
          noEmit: false,
          declaration: true,
          emitDeclarationOnly: true,
          outDir,
          // The tsconfig sits outside the repository: type packages are the repository's.
          typeRoots: [join(ROOT, 'node_modules/@types')],
          ...compilerOptions,
        },
        files: entries,
      }),
    );
    execFileSync(process.execPath, [TSC, '-p', config], { cwd: ROOT, stdio: 'inherit' });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const BANNER = (name, version) => `/* ${name} ${version} */`;

async function buildSdk(stage, version) {
  const src = join(ROOT, 'packages/sdk/src');
  const common = { bundle: true, logLevel: 'warning', legalComments: 'none', banner: { js: BANNER('@svc/sdk', version) } };
  // Universal ESM (Node, Deno, Bun, bundlers): platform neutral resolves nothing Node-specific either.
  await esbuild.build({
    ...common,
    entryPoints: [join(src, 'index.ts')],
    outfile: join(stage, 'dist/index.mjs'),
    format: 'esm',
    platform: 'neutral',
    target: 'es2022',
  });
  await esbuild.build({
    ...common,
    entryPoints: [join(src, 'index.ts')],
    outfile: join(stage, 'dist/index.cjs'),
    format: 'cjs',
    platform: 'node',
    target: 'node20',
  });
  // The browser entry: a Node built-in anywhere in it fails this build.
  await esbuild.build({
    ...common,
    entryPoints: [join(src, 'browser.ts')],
    outfile: join(stage, 'dist/browser.mjs'),
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
  });
  // Declared against the DOM library and no Node types: the SDK's types need nothing of Node's either.
  declarations([join(src, 'index.ts'), join(src, 'browser.ts')], join(stage, 'dist/types'), {
    rootDir: src,
    lib: ['ES2023', 'DOM', 'DOM.Iterable'],
    types: [],
  });
  // ESM importers' types: the same declarations (index.d.ts is CommonJS-flavoured, as the package is).
  writeFileSync(join(stage, 'dist/index.d.mts'), "export * from './types/index.js';\n");
}

async function buildCli(stage, version, sdkStage) {
  const src = join(ROOT, 'packages/cli/src');
  const pkg = readJson(join(ROOT, 'packages/cli/package.json'));
  await esbuild.build({
    entryPoints: [join(src, 'index.ts')],
    outfile: join(stage, 'dist/index.cjs'),
    bundle: true,
    format: 'cjs',
    platform: 'node',
    target: 'node20',
    // npm installs these beside the CLI; the SDK is its own package (the same version, stamped).
    external: Object.keys(pkg.dependencies ?? {}),
    logLevel: 'warning',
    legalComments: 'none',
    banner: { js: BANNER('@svc/cli', version) },
  });
  // The CLI's declarations import @svc/sdk: the SDK stage's declarations stand in for the installed package.
  declarations([join(src, 'index.ts')], join(stage, 'dist/types'), {
    rootDir: src,
    types: ['node'],
    paths: { '@svc/sdk': [join(sdkStage, 'dist/types/index.d.ts')] },
  });
}

const PACKAGES = [
  { key: 'sdk', dir: 'packages/sdk', build: buildSdk },
  { key: 'cli', dir: 'packages/cli', build: buildCli },
];

export async function releasePack({ version: wanted, out = join(ROOT, 'dist/release') } = {}) {
  const outDir = resolve(out);
  mkdirSync(outDir, { recursive: true });
  const stageRoot = mkdtempSync(join(tmpdir(), 'svc-release-'));
  const stages = {};
  const tarballs = {};
  try {
    for (const p of PACKAGES) {
      const pkgDir = join(ROOT, p.dir);
      const pkg = readJson(join(pkgDir, 'package.json'));
      const version = wanted ?? pkg.version;
      if (!SEMVER.test(version)) throw new Error(`not a semantic version: ${version}`);
      const stage = (stages[p.key] = join(stageRoot, p.key));
      mkdirSync(stage, { recursive: true });
      stageFiles(pkgDir, pkg, stage);
      await p.build(stage, version, stages.sdk);
      writeFileSync(join(stage, 'package.json'), `${JSON.stringify(publishedManifest(pkg, version), null, 2)}\n`);
      const packed = JSON.parse(
        execFileSync('npm', ['pack', '--json', '--pack-destination', outDir], {
          cwd: stage,
          encoding: 'utf8',
          stdio: ['ignore', 'pipe', 'inherit'],
        }),
      )[0];
      const file = join(outDir, packed.filename);
      tarballs[p.key] = {
        name: packed.name,
        version: packed.version,
        file,
        size: statSync(file).size,
        unpackedSize: packed.unpackedSize,
        files: packed.files.map((f) => f.path),
      };
    }
  } finally {
    rmSync(stageRoot, { recursive: true, force: true });
  }
  return tarballs;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  releasePack({ version: argOf('--version'), out: argOf('--out') })
    .then((tarballs) => {
      for (const t of Object.values(tarballs))
        process.stdout.write(
          `${t.name}@${t.version}: ${t.file} (${(t.size / 1024).toFixed(1)} KiB packed, ${(t.unpackedSize / 1024).toFixed(1)} KiB unpacked, ${t.files.length} files)\n`,
        );
      if (process.argv.includes('--json')) process.stdout.write(`${JSON.stringify(tarballs)}\n`);
    })
    .catch((err) => {
      process.stderr.write(`release:pack failed: ${err.stack ?? err}\n`);
      process.exit(1);
    });
}
