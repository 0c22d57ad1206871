/**
 * Group commit: writes asked for in the same turn of the event loop run in one transaction, each resolved with its
 * own result once that transaction commits (a write is durable when its promise resolves, as with its own
 * transaction). Under load, the ends of many replies share one commit instead of one each. The writes must not
 * throw in the ordinary course (a refusal would roll back the others' work with it): a failed batch fails every
 * write in it, as a failed transaction of its own would have.
 */
import type { Store, StoreSession } from '@svc/kit';

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
        const out: unknown[] = [];
        for (const p of batch) out.push(await p.write(tx));
        return out;
      });
      batch.forEach((p, i) => p.resolve(results[i]));
    } catch (err) {
      for (const p of batch) p.reject(err);
    }
  }
}
