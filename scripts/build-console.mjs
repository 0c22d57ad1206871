/**
 * Bundles the console (gateway/console: Preact pages in TSX) for the browser into one output folder: an entry
 * module, one chunk per page (loaded by the entry on demand, so a page downloads only what it uses), and shared
 * chunks. Minified, ES2020 modules, no source maps shipped. Each file is also written compressed (`.br`, `.gz`, at the
 * highest levels: once here, not at every start). The gateway serves the folder under /assets/console/.
 *
 *   node scripts/build-console.mjs [outdir]   (default gateway/public/console)
 */
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeCompressed } from './precompress.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
export const CONSOLE_OUT = join(ROOT, 'gateway/public/console');

export async function buildConsole(outdir = CONSOLE_OUT) {
  const esbuild = await import('esbuild');
  rmSync(outdir, { recursive: true, force: true });
  mkdirSync(outdir, { recursive: true });
  const result = await esbuild.build({
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
  return result.metafile;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const metafile = await buildConsole(process.argv[2]);
  for (const [file, out] of Object.entries(metafile.outputs)) process.stderr.write(`${file} ${out.bytes} bytes\n`);
}
