/**
 * Billing's POSTs with kit's `idempotent` (CONTRACT.md 5 and 14): its transactions go through `applyOnce`, which
 * runs one again when a concurrent writer won a ledger source key (it then sees that writer's work).
 */
import { idempotent as kitIdempotent, type Commit, type IdempotentOptions, type Store } from '@svc/kit';
import { applyOnce } from './ledger';

export type { Commit };

export function idempotent<R>(
  store: Store,
  scope: Parameters<typeof kitIdempotent<R>>[1],
  work: (commit: Commit<R>) => Promise<R>,
  options: IdempotentOptions = {},
): Promise<R> {
  return kitIdempotent(store, scope, work, { transact: applyOnce, ...options });
}
