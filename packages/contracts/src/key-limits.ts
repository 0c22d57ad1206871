import { monotonicNow } from '@svc/kit';
import type { identityV1 } from '@svc/proto';

/** How long this replica keeps a key's limits as identity answered them: well inside CONTRACT.md 8's one second. */
export const KEY_LIMITS_FRESH_MS = 250;
const KEPT_MAX = 10_000;

type Limits = identityV1.ApiKeyLimits | undefined;

/**
 * The calling key's limits, asked of identity at most once per KEY_LIMITS_FRESH_MS per key on this replica (and once
 * for the calls that ask together): a key's calls reserve without a gRPC round trip each, and a PATCH of its limits
 * still counts within a fraction of the contract's second on every replica (the spend itself is counted in billing's
 * store, exactly). A failed answer is not kept (identity down: the next call asks again, and is refused if it fails).
 */
export function keptKeyLimits(
  ask: (token: string) => Promise<Limits>,
  freshMs = KEY_LIMITS_FRESH_MS,
  now: () => number = monotonicNow,
): (token: string, tenantId: string, keyId: string) => Promise<Limits> {
  const kept = new Map<string, { at: number; value: Promise<Limits> }>();
  return (token, tenantId, keyId) => {
    const id = `${tenantId}|${keyId}`;
    const found = kept.get(id);
    if (found && now() - found.at < freshMs) return found.value;
    if (kept.size >= KEPT_MAX) kept.clear();
    const entry = { at: now(), value: ask(token) };
    kept.set(id, entry);
    entry.value.catch(() => kept.get(id) === entry && kept.delete(id));
    return entry.value;
  };
}
