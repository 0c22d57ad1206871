#!/usr/bin/env node
/**
 * The build of `@svc/sdk` and `@svc/cli`, for `npm pack` / `npm publish` in their folders and for `npm run release:pack`.
 *
 *   node ../../scripts/release-pack.mjs --build sdk|cli   (each package's `build`, run by its `prepack`) builds its dist/
 *   npm run release:pack                                  both tarballs, at the manifests' version, into dist/release/
 *   npm run release:pack -- --version 1.2.0               stamps 1.2.0 on both (and on the CLI's dependency on the SDK)
 *   npm run release:pack -- --out /tmp/release           another folder
 *
 * The manifests in the repository are the published ones: their entry points (main, types, exports, bin) are in
 * dist/, which `prepack` builds, so `npm pack` and `npm publish` in a package folder ship working JavaScript. In the
 * repository nothing reads dist/: the root tsconfig's `paths` map the packages to their source for tsc, tsx and jest.
 * `release:pack` is a wrapper: it builds each package the same way into its dist/, stages its `files` with a manifest
 * without what only the repository needs (scripts, devDependencies) and with the version stamped, and packs that.
 *
 * - SDK: dist/index.mjs (ESM) and dist/index.cjs (CommonJS), bundled from src/ with esbuild; dist/browser.mjs, the
 *   browser entry, built for platform=browser (esbuild fails on any Node built-in); dist/types/ (tsc declarations,
 *   compiled against the DOM library and no Node types) and dist/index.d.mts for ESM importers. No dependency.
 * - CLI: dist/index.cjs (CommonJS, Node 20) with its npm dependencies (commander, nanospinner, @svc/sdk) left to
 *   npm; dist/svc.cjs runs it as `svc`; dist/types/ declares `run` and `buildProgram`.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
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

/** The staged manifest: the repository's (already the published one), stamped, without what only the repository uses. */
function stampedManifest(pkg, version) {
  const manifest = { ...pkg, version };
  for (const repoOnly of ['scripts', 'devDependencies']) delete manifest[repoOnly];
  if (manifest.dependencies)
    manifest.dependencies = Object.fromEntries(
      Object.entries(manifest.dependencies).map(([name, range]) => [name, name.startsWith('@svc/') ? version : range]),
    );
  return manifest;
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

async function buildSdk(dist, version) {
  const src = join(ROOT, 'packages/sdk/src');
  const common = { bundle: true, logLevel: 'warning', legalComments: 'none', banner: { js: BANNER('@svc/sdk', version) } };
  // Universal ESM (Node, Deno, Bun, bundlers): platform neutral resolves nothing Node-specific either.
  await esbuild.build({
    ...common,
    entryPoints: [join(src, 'index.ts')],
    outfile: join(dist, 'index.mjs'),
    format: 'esm',
    platform: 'neutral',
    target: 'es2022',
  });
  await esbuild.build({
    ...common,
    entryPoints: [join(src, 'index.ts')],
    outfile: join(dist, 'index.cjs'),
    format: 'cjs',
    platform: 'node',
    target: 'node20',
  });
  // The browser entry: a Node built-in anywhere in it fails this build.
  await esbuild.build({
    ...common,
    entryPoints: [join(src, 'browser.ts')],
    outfile: join(dist, 'browser.mjs'),
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
  });
  // Declared against the DOM library and no Node types: the SDK's types need nothing of Node's either.
  declarations([join(src, 'index.ts'), join(src, 'browser.ts')], join(dist, 'types'), {
    rootDir: src,
    lib: ['ES2023', 'DOM', 'DOM.Iterable'],
    types: [],
  });
  // ESM importers' types: the same declarations (index.d.ts is CommonJS-flavoured, as the package is).
  writeFileSync(join(dist, 'index.d.mts'), "export * from './types/index.js';\n");
}

async function buildCli(dist, version) {
  const src = join(ROOT, 'packages/cli/src');
  const pkg = readJson(join(ROOT, 'packages/cli/package.json'));
  await esbuild.build({
    entryPoints: [join(src, 'index.ts')],
    outfile: join(dist, 'index.cjs'),
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
  // The command: a launcher beside the bundle (npm links `bin` and makes it executable; so is it here for a checkout).
  const bin = join(dist, 'svc.cjs');
  writeFileSync(
    bin,
    `#!/usr/bin/env node\n${BANNER('@svc/cli', version)}\nrequire('./index.cjs')\n  .run(process.argv, process.env)\n  .then((code) => {\n    process.exitCode = code;\n  });\n`,
  );
  chmodSync(bin, 0o755);
  // The CLI's declarations import @svc/sdk (kept as that specifier): its source stands in for the installed package,
  // and the SDK's declarations emitted beside the CLI's are dropped.
  const emitted = mkdtempSync(join(tmpdir(), 'svc-cli-dts-'));
  try {
    declarations([join(src, 'index.ts')], emitted, {
      rootDir: join(ROOT, 'packages'),
      types: ['node'],
      paths: { '@svc/sdk': [join(ROOT, 'packages/sdk/src/index.ts')] },
    });
    cpSync(join(emitted, 'cli/src'), join(dist, 'types'), { recursive: true });
  } finally {
    rmSync(emitted, { recursive: true, force: true });
  }
}

const PACKAGES = {
  sdk: { dir: 'packages/sdk', build: buildSdk },
  cli: { dir: 'packages/cli', build: buildCli },
};

/**
 * Builds one package's dist/ in its folder, from nothing (a file left by an earlier build cannot ship). The CLI's
 * dependency on the SDK must name the SDK's version: the two are released together.
 */
export async function build(key, version) {
  const { dir, build: buildPackage } = PACKAGES[key] ?? {};
  if (!dir) throw new Error(`unknown package ${key}: one of ${Object.keys(PACKAGES).join(', ')}`);
  const pkg = readJson(join(ROOT, dir, 'package.json'));
  const sdkVersion = readJson(join(ROOT, PACKAGES.sdk.dir, 'package.json')).version;
  const wanted = pkg.dependencies?.['@svc/sdk'];
  if (wanted !== undefined && wanted !== sdkVersion)
    throw new Error(`${pkg.name} depends on @svc/sdk ${wanted} but packages/sdk is ${sdkVersion}: give both the same version`);
  const dist = join(ROOT, dir, 'dist');
  rmSync(dist, { recursive: true, force: true });
  await buildPackage(dist, version ?? pkg.version);
  return pkg;
}

export async function releasePack({ version: wanted, out = join(ROOT, 'dist/release') } = {}) {
  if (wanted !== undefined && !SEMVER.test(wanted)) throw new Error(`not a semantic version: ${wanted}`);
  const outDir = resolve(out);
  mkdirSync(outDir, { recursive: true });
  const stageRoot = mkdtempSync(join(tmpdir(), 'svc-release-'));
  const tarballs = {};
  try {
    for (const [key, { dir }] of Object.entries(PACKAGES)) {
      const pkg = await build(key, wanted);
      const version = wanted ?? pkg.version;
      const stage = join(stageRoot, key);
      mkdirSync(stage, { recursive: true });
      for (const entry of pkg.files ?? []) cpSync(join(ROOT, dir, entry), join(stage, entry), { recursive: true });
      writeFileSync(join(stage, 'package.json'), `${JSON.stringify(stampedManifest(pkg, version), null, 2)}\n`);
      const packed = JSON.parse(
        execFileSync('npm', ['pack', '--json', '--pack-destination', outDir], {
          cwd: stage,
          encoding: 'utf8',
          stdio: ['ignore', 'pipe', 'inherit'],
        }),
      )[0];
      const file = join(outDir, packed.filename);
      tarballs[key] = {
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

const main = () => {
  const only = argOf('--build');
  if (only) return build(only).then(() => undefined);
  return releasePack({ version: argOf('--version'), out: argOf('--out') }).then((tarballs) => {
    for (const t of Object.values(tarballs))
      process.stdout.write(
        `${t.name}@${t.version}: ${t.file} (${(t.size / 1024).toFixed(1)} KiB packed, ${(t.unpackedSize / 1024).toFixed(1)} KiB unpacked, ${t.files.length} files)\n`,
      );
    if (process.argv.includes('--json')) process.stdout.write(`${JSON.stringify(tarballs)}\n`);
  });
};

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  main().catch((err) => {
    process.stderr.write(`release-pack failed: ${err.stack ?? err}\n`);
    process.exit(1);
  });
}
