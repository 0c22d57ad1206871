import { randomFillSync } from 'node:crypto';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/**
 * Random bytes drawn from one pool refilled 4 KiB at a time: a `randomBytes` call per id is a trip into the
 * kernel's CSPRNG each (~15 µs; four ids a write). Same generator, same unpredictability; bytes are never reused.
 */
const pool = Buffer.alloc(4096);
let used = pool.length;

function randomByte(): number {
  if (used === pool.length) {
    randomFillSync(pool);
    used = 0;
  }
  return pool[used++];
}

/** Uniform base62 string of `length` characters (rejection sampling keeps it unbiased). */
export function randomBase62(length: number): string {
  let out = '';
  while (out.length < length) {
    const b = randomByte();
    if (b < 248) out += BASE62[b % 62];
  }
  return out;
}

/**
 * Resource ids: a type prefix and a time-ordered random part, e.g. `prj_01HV...`. Time order keeps
 * inserts local in indexes; the random tail (80 bits) makes ids unguessable.
 */
export function newId(prefix: string): string {
  const time = Date.now().toString(36).padStart(9, '0');
  return `${prefix}_${time}${randomBase62(14)}`;
}

let isoMs = NaN;
let iso = '';
/** The time now in ISO 8601, formatted once per millisecond: a model call's records ask for it a dozen times. */
export function nowIso(): string {
  const ms = Date.now();
  if (ms !== isoMs) {
    isoMs = ms;
    iso = new Date(ms).toISOString();
  }
  return iso;
}
