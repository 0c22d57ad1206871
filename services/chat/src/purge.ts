import { nowIso, type Store } from '@svc/kit';
import { responses } from './collections';

/** Deletes responses whose retention ended, oldest first (the collection sorts by `expiresAt`). Returns how many. */
export async function purgeExpiredResponses(store: Store, now = nowIso()): Promise<number> {
  const col = store.collection(responses);
  let purged = 0;
  for (;;) {
    const page = await col.find({}, { limit: 200, order: 'asc' });
    const expired = page.items.filter((r) => r.expiresAt <= now);
    for (const r of expired) if (await col.delete(r.id)) purged++;
    if (expired.length < page.items.length || !page.nextCursor) return purged;
  }
}
