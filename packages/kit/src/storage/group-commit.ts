/**
 * Group commit: writes asked for in the same turn of the event loop run in one transaction, each resolved with its
 * own result once that transaction commits (a write is durable when its promise resolves, as with its own
 * transaction). Under load, the ends of many replies share one commit instead of one each. A write may refuse with an
 * AppError (a cap) only before it has written anything: that write alone is rejected and the batch goes on. Any other
 * failure fails every write in the batch, as a failed transaction of its own would have.
 */
import { isAppError } from '../errors';
import type { Store, StoreSession } from './types';

interface Pending {
  write: (tx: StoreSession) => Promise<unknown>;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
}

export class GroupCommit {
  private queued: Pending[] | null = null;

  constructor(private readonly store: Store) {}

  commit<T>(write: (tx: StoreSession) => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (!this.queued) {
        this.queued = [];
        // After this turn's I/O callbacks: the writes they ask for join the batch.
        setImmediate(() => void this.run());
      }
      this.queued.push({ write, resolve: resolve as (value: unknown) => void, reject });
    });
  }

  private async run(): Promise<void> {
    const batch = this.queued!;
    this.queued = null;
    try {
      const results = await this.store.transaction(async (tx) => {
        const out: Array<{ value: unknown } | { refused: unknown }> = [];
        for (const p of batch) {
          try {
            out.push({ value: await p.write(tx) });
          } catch (err) {
            if (!isAppError(err)) throw err;
            out.push({ refused: err });
          }
        }
        return out;
      });
      batch.forEach((p, i) => {
        const r = results[i]!;
        if ('refused' in r) p.reject(r.refused);
        else p.resolve(r.value);
      });
    } catch (err) {
      for (const p of batch) p.reject(err);
    }
  }
}
