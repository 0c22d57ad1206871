import { KeySlots, type Store } from '@svc/kit';
import { messages } from './collections';

/** An API key's concurrency limit over chat replies: those still pending or streaming (kit KeySlots). */
export function keyReplySlots(store: Store): KeySlots {
  return new KeySlots(store, {
    plural: 'replies being generated',
    async count(tx, tenantId, keyId, limit) {
      let n = 0;
      for (const status of ['pending', 'streaming'] as const)
        n += (await tx.collection(messages).find({ tenantId, credentialId: keyId, status }, { limit })).items.length;
      return n;
    },
  });
}
