import { LeaseWatch, monotonicNow } from './lease';
import type { Logger } from './logger';

/**
 * A periodic pass that ends what nothing renewed (reservations, escrows): each pass sees the records through one
 * LeaseWatch, so a record expires only after this process itself has seen it unchanged for its lease (no clocks
 * compared across machines). One pass runs at a time; a failed pass is logged and the next tick tries again; stop()
 * waits for the pass under way. Subclasses say what one pass does and return how many records it ended.
 */
export abstract class StaleSweeper {
  protected readonly watch: LeaseWatch;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<number> | null = null;

  constructor(
    protected readonly logger: Logger,
    private readonly intervalMs: number,
    /** What is swept, for the log line of a failed pass. */
    private readonly what: string,
    now: () => number = monotonicNow,
  ) {
    this.watch = new LeaseWatch(now);
  }

  start(): void {
    this.timer = setInterval(() => void this.sweep(), this.intervalMs);
    this.timer.unref();
  }

  stop(): Promise<unknown> {
    clearInterval(this.timer);
    return this.running ?? Promise.resolve();
  }

  sweep(): Promise<number> {
    this.running ??= this.pass()
      .catch((err: unknown) => {
        this.logger.warn({ err }, `expiring ${this.what} failed; will retry`);
        return 0;
      })
      .finally(() => (this.running = null));
    return this.running;
  }

  protected abstract pass(): Promise<number>;
}
