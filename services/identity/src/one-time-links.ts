import { nowIso, randomBase62, sha256Hex } from '@svc/kit';

/** A one-time link's token (sent only in the email) and its SHA-256, the only form stored. */
export function newLinkToken(): { token: string; hash: string } {
  const token = randomBase62(43);
  return { token, hash: sha256Hex(token) };
}

/** Expiry of a link made now: `ttlMs` from this process's clock (the one that also judges it, within a skew). */
export const expiresIn = (ttlMs: number): string => new Date(Date.now() + ttlMs).toISOString();

export const hasExpired = (expiresAt: string): boolean => expiresAt <= nowIso();
