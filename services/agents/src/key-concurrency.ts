import { KeySlots, type Store } from '@svc/kit';
import { runs } from './collections';

/**
 * An API key's concurrency limit over agent runs: those queued or running (kit KeySlots). A run waiting for a
 * person's approval makes no model call meanwhile, and does not hold a place.
 */
export function keyRunSlots(store: Store): KeySlots {
  return new KeySlots(store, {
    plural: 'runs in progress',
    async count(tx, tenantId, keyId, limit) {
      let n = 0;
      for (const status of ['queued', 'running'] as const)
        n += (await tx.collection(runs).find({ tenantId, credentialId: keyId, status }, { limit })).items.length;
      return n;
    },
  });
}
