/** Counter documents moved with each usage entry. */
import type { Collection } from '@svc/kit';

/**
 * Adds `by` to the counter `id`, creating it (from `fresh`, with zero counts) on first use. The increment comes
 * first: a counter exists on all but its first use, so the common case is one statement, not a read and a write.
 * Run in the usage entry's transaction; a concurrent first use elsewhere fails on the id and the transaction is
 * retried (applyOnce), as before.
 */
export async function addToCounter<T extends { id: string }>(
  col: Collection<T>,
  id: string,
  by: Partial<Record<keyof T & string, number>>,
  fresh: () => T,
): Promise<T> {
  const moved = await col.increment(id, {}, by);
  if (moved) return moved;
  await col.insert(fresh());
  return (await col.increment(id, {}, by))!;
}
