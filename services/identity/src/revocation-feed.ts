import type { Logger, Store } from '@svc/kit';
import { untraced } from '@svc/kit';
import { revocations } from './collections';

type Notify = () => void;

/**
 * Tells the gateways that watch (WatchRevocations) when revocations may have been recorded, so that they read
 * ListRevocations when there is something to read instead of polling it over gRPC. A revocation written by this
 * process notifies at once; one written by another replica of identity is found by a cheap read of the newest
 * sequence number every `pollMs`, which runs only while some gateway is watching this replica.
 */
export class RevocationFeed {
  private readonly watchers = new Set<Notify>();
  /** Ends every open watch (the server is stopping: its streams must not hold the drain). */
  private readonly ending = new AbortController();
  private timer: NodeJS.Timeout | null = null;
  private newestSeq: number | null = null;

  constructor(
    private readonly store: Store,
    private readonly options: { pollMs: number; logger: Logger },
  ) {}

  /** After recording a revocation: every watcher hears of it now. */
  announce(): void {
    for (const notify of this.watchers) notify();
  }

  /** Serves one watcher until `signal` aborts: a notice at once (to read what it missed), then one per change. */
  async watch(send: (notice: { at: number }) => Promise<void>, signal: AbortSignal): Promise<void> {
    const notify = () => void send({ at: Date.now() });
    this.watchers.add(notify);
    this.pollWhileWatched();
    try {
      notify();
      const done = AbortSignal.any([signal, this.ending.signal]);
      await new Promise<void>((resolve) => (done.aborted ? resolve() : done.addEventListener('abort', () => resolve(), { once: true })));
    } finally {
      this.watchers.delete(notify);
      if (this.watchers.size === 0 && this.timer) {
        clearInterval(this.timer);
        this.timer = null;
      }
    }
  }

  /** Ends every watch (each stream closes with OK; gateways reconnect to another replica) and stops reading. */
  stop(): void {
    this.ending.abort();
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  private pollWhileWatched(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.lookForOthers(), this.options.pollMs);
    this.timer.unref();
  }

  /** Revocations recorded by other replicas: the newest sequence number moved. */
  private async lookForOthers(): Promise<void> {
    try {
      const page = await untraced(() => this.store.collection(revocations).find({}, { order: 'desc', limit: 1 }));
      const seq = page.items[0]?.seq ?? 0;
      if (this.newestSeq !== null && seq !== this.newestSeq) this.announce();
      this.newestSeq = seq;
    } catch (err) {
      this.options.logger.warn({ err }, 'revocation feed read failed');
    }
  }
}
