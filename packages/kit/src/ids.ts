import { randomBytes } from 'node:crypto';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** Uniform base62 string from `bytes` random bytes (rejection sampling keeps it unbiased). */
export function randomBase62(length: number): string {
  let out = '';
  while (out.length < length) {
    for (const b of randomBytes(length * 2)) {
      if (b < 248) out += BASE62[b % 62];
      if (out.length === length) break;
    }
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

export function nowIso(): string {
  return new Date().toISOString();
}
