import type { Store } from '@svc/kit';
import { KeySlots } from '@svc/contracts';
import { messages } from './collections';

/** An API key's concurrency limit over chat replies: those still pending or streaming (kit KeySlots). */
export const keyReplySlots = (store: Store) =>
  new KeySlots(store, { plural: 'replies being generated', collection: messages, unfinished: ['pending', 'streaming'] });
