import type { Store } from '@svc/kit';
import { KeySlots } from '@svc/contracts';
import { runs } from './collections';

/**
 * An API key's concurrency limit over agent runs: those queued or running (kit KeySlots). A run waiting for a
 * person's approval makes no model call meanwhile, and does not hold a place.
 */
export const keyRunSlots = (store: Store) =>
  new KeySlots(store, { plural: 'runs in progress', collection: runs, unfinished: ['queued', 'running'] });
