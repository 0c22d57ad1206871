/**
 * Bundles the console (gateway/console: Preact pages in TSX) for the browser into one output folder: an entry
 * module, one chunk per page (loaded by the entry on demand, so a page downloads only what it uses), and shared
 * chunks. Minified, ES2020 modules, no source maps shipped. Each file is also written compressed (`.br`, `.gz`, at the
 * highest levels: once here, not at every start). The gateway serves the folder under /assets/console/.
 *
 * Beside them, `manifest.json`: console page name -> every chunk that page runs before its first render (the entry's
 * own imports, the page's chunk, its imports and what it imports on demand, such as /usage's Chart.js), so that the
 * page's HTML shell can name them all in `<link rel="modulepreload">` and the browser fetches them beside the entry
 * instead of one import after another (docs/decisions.md).
 *
 *   node scripts/build-console.mjs [outdir]   (default gateway/public/console)
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeCompressed } from './precompress.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
export const CONSOLE_OUT = join(ROOT, 'gateway/public/console');

export async function buildConsole(outdir = CONSOLE_OUT) {
  const esbuild = await import('esbuild');
  rmSync(outdir, { recursive: true, force: true });
  mkdirSync(outdir, { recursive: true });
  const result = await esbuild.build({
    absWorkingDir: ROOT,
    entryPoints: { main: join(ROOT, 'gateway/console/main.tsx') },
    outdir,
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'browser',
    target: ['es2020', 'chrome100', 'firefox100', 'safari15'],
    minify: true,
    jsx: 'automatic',
    jsxImportSource: 'preact',
    tsconfig: join(ROOT, 'gateway/console/tsconfig.json'),
    chunkNames: 'chunk-[hash]',
    entryNames: '[name]',
    metafile: true,
    legalComments: 'none',
    logLevel: 'warning',
  });
  for (const file of Object.keys(result.metafile.outputs)) writeCompressed(join(ROOT, file), readFileSync(join(ROOT, file)));
  writeFileSync(join(outdir, MANIFEST), JSON.stringify(preloadManifest(result.metafile)) + '\n');
  return result.metafile;
}

export const MANIFEST = 'manifest.json';

/**
 * Page name (its file under gateway/console/pages, the shell's `data-page`) -> the chunks it needs, file names in the
 * output folder, in the order they are needed: what the entry imports, then the page's chunk and what it imports
 * statically or on demand. The entry itself is left out (the shell's script tag names it).
 */
export function preloadManifest(metafile) {
  const outputs = Object.entries(metafile.outputs).filter(([file]) => file.endsWith('.js'));
  const byFile = new Map(outputs);
  // Every chunk a chunk needs: what it imports, with theirs (imports within the output folder only).
  const closure = (file, kinds, seen = new Set()) => {
    for (const i of byFile.get(file)?.imports ?? []) {
      if (!kinds.includes(i.kind) || seen.has(i.path) || !byFile.has(i.path)) continue;
      seen.add(i.path);
      closure(i.path, ['import-statement'], seen);
    }
    return seen;
  };
  const entry = outputs.find(([, out]) => out.entryPoint === 'gateway/console/main.tsx')?.[0];
  if (!entry) throw new Error('console build: no output for gateway/console/main.tsx');
  const shared = [...closure(entry, ['import-statement'])];
  const pages = {};
  for (const [file, out] of outputs) {
    const page = /^gateway\/console\/pages\/([\w-]+)\.tsx$/.exec(out.entryPoint ?? '')?.[1];
    if (!page) continue;
    const own = [file, ...closure(file, ['import-statement', 'dynamic-import'])];
    pages[page] = [...new Set([...shared, ...own])].map((f) => basename(f));
  }
  return pages;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const metafile = await buildConsole(process.argv[2]);
  for (const [file, out] of Object.entries(metafile.outputs)) process.stderr.write(`${file} ${out.bytes} bytes\n`);
}
