/**
 * The compressed copies the gateway serves as they are (`<file>.br`, `<file>.gz`, at the highest levels): written once
 * at build time for the console's bundle and the API reference's files, never per request or per start.
 */
import { writeFileSync } from 'node:fs';
import { brotliCompressSync, constants, gzipSync } from 'node:zlib';

/** Writes `<path>.br` and `<path>.gz` of `body`; answers their sizes. */
export function writeCompressed(path, body) {
  const br = brotliCompressSync(body, {
    params: { [constants.BROTLI_PARAM_QUALITY]: 11, [constants.BROTLI_PARAM_SIZE_HINT]: body.length },
  });
  const gz = gzipSync(body, { level: 9 });
  writeFileSync(`${path}.br`, br);
  writeFileSync(`${path}.gz`, gz);
  return { br: br.length, gzip: gz.length };
}
