/**
 * The API reference's browser files (/docs): Swagger UI's bundle and stylesheet from swagger-ui-dist, and the page's
 * own script and stylesheet (gateway/src/docs/assets), copied into one output folder, each also written compressed
 * (`.br`, `.gz`, at the highest levels: once here, not at every start or on the first request). The gateway serves
 * the folder under /assets/docs/ as it serves the console's (gateway/src/pages: ETag, `vary: accept-encoding`).
 * Source map comments are dropped: the maps are not shipped.
 *
 *   node scripts/build-docs.mjs [outdir]   (default gateway/public/docs; nothing is done when no input changed)
 */
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeCompressed } from './precompress.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
export const DOCS_OUT = join(ROOT, 'gateway/public/docs');

export function buildDocs(outdir = DOCS_OUT) {
  // swagger-ui-dist is the gateway's dependency: resolved from the gateway's folder.
  const swagger = dirname(createRequire(join(ROOT, 'gateway/package.json')).resolve('swagger-ui-dist/package.json'));
  const own = join(ROOT, 'gateway/src/docs/assets');
  const files = {
    'swagger-ui-bundle.js': join(swagger, 'swagger-ui-bundle.js'),
    'swagger-ui.css': join(swagger, 'swagger-ui.css'),
    'docs.js': join(own, 'docs.js'),
    'docs.css': join(own, 'docs.css'),
  };
  // Brotli 11 of Swagger UI's 1.7 MB bundle takes seconds: done again only when an input changed, not at every build
  // that some other source file made necessary.
  const stamp = join(outdir, '.inputs');
  const inputs = JSON.stringify(Object.entries(files).map(([name, from]) => [name, statSync(from).size, statSync(from).mtimeMs]));
  if (existsSync(stamp) && readFileSync(stamp, 'utf8') === inputs) return null;
  rmSync(outdir, { recursive: true, force: true });
  mkdirSync(outdir, { recursive: true });
  const sizes = {};
  for (const [name, from] of Object.entries(files)) {
    const body = Buffer.from(readFileSync(from, 'utf8').replace(/\n?\/[/*][#@] sourceMappingURL=[^\n]*\s*$/, '\n'));
    writeFileSync(join(outdir, name), body);
    sizes[name] = { raw: body.length, ...writeCompressed(join(outdir, name), body) };
  }
  writeFileSync(stamp, inputs);
  return sizes;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  for (const [name, s] of Object.entries(buildDocs(process.argv[2]) ?? {}))
    process.stderr.write(`${name} ${s.raw} bytes (gzip ${s.gzip}, br ${s.br})\n`);
}
