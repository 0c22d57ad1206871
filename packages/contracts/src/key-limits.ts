import { monotonicNow, untraced } from '@svc/kit';
import type { identityV1 } from '@svc/proto';

/** From this age on, a kept answer is still served but asked again in the background (refresh-ahead). */
export const KEY_LIMITS_SOFT_MS = 250;
/**
 * No answer older than this is served: a PATCH of a key's limits counts on every replica by then (CONTRACT.md 8 says
 * within one second; half of it is left for the rest of the way). Ages run on this process's monotonic clock, from
 * when the question was sent, so no two machines' clocks are compared.
 */
export const KEY_LIMITS_HARD_MS = 500;
/** Keys kept per process; past it the key refreshed longest ago is dropped first. */
export const KEY_LIMITS_KEPT_MAX = 10_000;

type Limits = identityV1.ApiKeyLimits | undefined;

interface Kept {
  /** When the question of the kept answer was sent (monotonic ms); -Infinity while there is none. */
  at: number;
  answer: Promise<Limits> | null;
  /** The question in flight, if any: every caller that has to wait, and the background refresh, share it. */
  asking: { at: number; answer: Promise<Limits> } | null;
}

export interface KeptKeyLimitsOptions {
  softMs?: number;
  hardMs?: number;
  maxKeys?: number;
  now?: () => number;
  /** Told of a background refresh that failed (the kept answer stays until the hard age). */
  onRefreshError?: (err: unknown) => void;
}

/**
 * The calling key's limits as identity answered them, kept per key on this replica with refresh-ahead: an answer
 * younger than `softMs` is served as is; one between `softMs` and `hardMs` is served while one question goes to
 * identity in the background; only a key with no answer younger than `hardMs` (cold, idle, or identity failing)
 * waits for identity. So a busy key's model calls never wait on identity, and a PATCH of its limits counts within
 * `hardMs` of its commit on every replica (the spend itself is counted in billing's store, exactly).
 *
 * One question per key at a time (single flight): callers that must wait share the one in flight, unless it was sent
 * more than `hardMs` ago (its answer could not be served). A failed question is not kept: callers that waited on it
 * get its error (identity down: refused, as before), and a failed refresh leaves the older answer to be served until
 * its hard age, the next call past `softMs` asking again. At most `maxKeys` keys are kept (the one refreshed longest
 * ago goes first).
 */
export function keptKeyLimits(
  ask: (token: string) => Promise<Limits>,
  options: KeptKeyLimitsOptions = {},
): (token: string, tenantId: string, keyId: string) => Promise<Limits> {
  const softMs = options.softMs ?? KEY_LIMITS_SOFT_MS;
  const hardMs = options.hardMs ?? KEY_LIMITS_HARD_MS;
  const maxKeys = options.maxKeys ?? KEY_LIMITS_KEPT_MAX;
  const now = options.now ?? monotonicNow;
  const kept = new Map<string, Kept>();
  /** Drops the keys answered longest ago (the map's first) while there are too many. */
  const trim = () => {
    while (kept.size > maxKeys) kept.delete(kept.keys().next().value!);
  };

  const question = (id: string, entry: Kept, token: string, at: number): Promise<Limits> => {
    const answer = ask(token);
    const asking = { at, answer };
    entry.asking = asking;
    answer.then(
      () => {
        if (entry.asking === asking) entry.asking = null;
        // A later question's answer is not overwritten by an earlier one's.
        if (at < entry.at) return;
        entry.at = at;
        entry.answer = answer;
        // Re-inserted: the map's order is the order of the last answers, the oldest first to go.
        if (kept.get(id) === entry) kept.delete(id);
        kept.set(id, entry);
        trim();
      },
      () => {
        if (entry.asking === asking) entry.asking = null;
        // A key never answered for keeps no place.
        if (!entry.answer && !entry.asking && kept.get(id) === entry) kept.delete(id);
      },
    );
    return answer;
  };

  /** A place for a key not kept yet, the oldest key going when there are too many. */
  const placed = (id: string): Kept => {
    const entry: Kept = { at: -Infinity, answer: null, asking: null };
    kept.set(id, entry);
    trim();
    return entry;
  };

  return (token, tenantId, keyId) => {
    const id = `${tenantId}|${keyId}`;
    const t = now();
    const entry = kept.get(id) ?? placed(id);
    const age = t - entry.at;
    if (entry.answer && age < hardMs) {
      // Not part of the calling request's trace: it outlives the request, and nothing waits on it.
      if (age >= softMs && !entry.asking)
        untraced(() => question(id, entry, token, t)).catch((err: unknown) => options.onRefreshError?.(err));
      return entry.answer;
    }
    if (entry.asking && t - entry.asking.at < hardMs) return entry.asking.answer;
    return question(id, entry, token, t);
  };
}
