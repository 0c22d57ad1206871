/**
 * A collection kept for a number of days by its sort field (an event log, a request log): reads bound it by
 * `cutoff()`, so an old record is gone from them at once, and a sweep deletes what is past it, oldest first, a bounded
 * batch per transaction, now and then hourly. Safe on any number of replicas: two sweeps at once delete the same
 * records at worst, and deleting a record already gone changes nothing.
 */
import type { Logger } from '../logger';
import type { CollectionDef, Store, StoreSession, Where } from './types';

const DAY_MS = 86_400_000;
const SWEEP_EVERY_MS = 3_600_000;
const SWEEP_BATCH = 500;

export interface RetentionOptions<T = unknown> {
  retentionDays: number;
  logger: Logger;
  /** What the log lines call the collection ('request log'). */
  label: string;
  now?: () => number;
  /** Deletes what belongs to a record being swept, in the same transaction (an index kept beside it). */
  alsoDelete?: (tx: StoreSession, doc: T) => Promise<void>;
  /** For records that change: deletes one only while it still matches this (as read); a changed one is kept. */
  unchanged?: (doc: T) => Where<T>;
}

export class Retention<T extends { id: string }> {
  private timer: NodeJS.Timeout | null = null;
  private sweeping: Promise<void> | null = null;

  constructor(
    private readonly store: Store,
    private readonly collection: CollectionDef<T>,
    private readonly o: RetentionOptions<T>,
  ) {}

  /** The oldest sort value still kept (exclusive). */
  cutoff(): string {
    return new Date((this.o.now ?? Date.now)() - this.o.retentionDays * DAY_MS).toISOString();
  }

  /** Deletes every record past the retention, oldest first, a bounded batch per transaction; returns how many. */
  async sweep(): Promise<number> {
    let deleted = 0;
    for (;;) {
      const { items } = await this.store
        .collection(this.collection)
        .find({}, { order: 'asc', limit: SWEEP_BATCH, range: { lte: this.cutoff() } });
      if (items.length === 0) return deleted;
      await this.store.transaction(async (tx) => {
        for (const doc of items) {
          const gone = await tx.collection(this.collection).delete(doc.id, this.o.unchanged?.(doc));
          if (gone) deleted++;
          // A record changed meanwhile keeps what belongs to it.
          if (gone || !this.o.unchanged) await this.o.alsoDelete?.(tx, doc);
        }
      });
    }
  }

  /** Sweeps now and then hourly, until stopped. */
  start(): void {
    const run = () => {
      this.sweeping ??= this.sweep()
        .then((n) => {
          if (n > 0) this.o.logger.info({ deleted: n }, `${this.o.label}: records past the retention deleted`);
        })
        .catch((err: unknown) => this.o.logger.warn({ err }, `${this.o.label} sweep failed; next hour`))
        .finally(() => (this.sweeping = null));
    };
    run();
    this.timer = setInterval(run, SWEEP_EVERY_MS).unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.sweeping;
  }
}
