/**
 * The tenant's events as they happen (CONTRACT.md 14, `GET /events/stream`): each open stream reads the tenant's
 * events after the last place it sent, in the event log's commit order (`EventLog.after`), so a stream resumed after
 * event E sends every event committed after E once, with no gap and no duplicate, whichever replica appended them and
 * whatever their clocks say. It reads again when this replica commits events of the tenant (`EventLog.onAppended`),
 * when the store reports a commit by any replica (`wake`, a hint) that moved the tenant past what it has read, and
 * every SAFETY_READ_MS whatever happens. A hint says only that something was written, by any tenant: as kit's
 * FeedNotifier does for its feeds, it costs one read of each waiting tenant's newest place, and only the streams
 * behind it read (a busy tenant does not make every other tenant's streams read).
 */
import { errors } from '@svc/kit';
import type { EventDoc } from './collections';
import type { EventLog } from './event-log';

/** Between reads when nothing says there is something to read: a lost hint is found this late at worst. */
export const SAFETY_READ_MS = 5000;
/** Events read per page while a stream catches up. */
const PAGE = 100;

export interface EventStreamsOptions {
  log: EventLog;
  /** The store's write hints (kit ServiceRuntime.wake), followed only while a stream is open. */
  wake: (hint: () => void) => () => void;
  safetyReadMs?: number;
}

/** A way to wait for the next reason to read, taken before a read so that a reason during the read is not lost. */
interface Waiter {
  tenantId: string;
  /** The place of the tenant's commit order its stream has read up to (a hint below it is nothing new to it). */
  seq: number;
  /** Resolves `next` (once). */
  resolve: () => void;
  next: Promise<void>;
}

export class EventStreams {
  private readonly waiting = new Set<Waiter>();
  /** Ends every open stream (the service is stopping: its streams must not hold the drain). */
  private readonly ending = new AbortController();
  private open = 0;
  private unwake: (() => void) | null = null;
  private readonly unlisten: () => void;
  /** A hint's reads of the tenants' newest places are running; `hintAgain`: another hint came meanwhile. */
  private looking = false;
  private hintAgain = false;

  constructor(private readonly o: EventStreamsOptions) {
    this.unlisten = o.log.onAppended((tenantId) => this.wakeUp((w) => w.tenantId === tenantId));
  }

  /**
   * Sends the tenant's events to one reader until `signal` aborts or the service stops: `opened` once the start is
   * known (after `afterEventId`, or after the newest event committed now), then every event after it, in commit
   * order. An `afterEventId` that is not an event of the tenant (unknown, past the retention, another tenant's) is
   * 404: resuming from it could not be gap-free.
   */
  async serve(
    tenantId: string,
    afterEventId: string,
    opened: () => Promise<void>,
    send: (event: EventDoc) => Promise<void>,
    signal: AbortSignal,
  ): Promise<void> {
    const { log } = this.o;
    let seq = afterEventId ? await log.placeOf(tenantId, afterEventId) : await log.newestPlace(tenantId);
    if (seq === null) throw errors.notFound('event', afterEventId);
    const done = AbortSignal.any([signal, this.ending.signal]);
    this.opened();
    try {
      await opened();
      while (!done.aborted) {
        const waiter = this.nextReason(tenantId, seq, done);
        for (;;) {
          const page = await log.after(tenantId, seq, PAGE);
          for (const event of page.events) {
            if (done.aborted) return;
            await send(event);
          }
          seq = waiter.seq = page.lastSeq;
          if (page.events.length < PAGE) break;
        }
        await waiter.next;
      }
    } finally {
      this.closed();
    }
  }

  /** Ends every open stream (each call ends with OK; the gateway ends its SSE responses). */
  stop(): void {
    this.ending.abort();
    this.unlisten();
    this.unwake?.();
    this.unwake = null;
  }

  /**
   * The next reason to read the tenant's events, for a stream at place `seq` (which it moves as it reads): an append,
   * a write hint that moved the tenant past it, the safety read, or the end.
   */
  private nextReason(tenantId: string, seq: number, done: AbortSignal): Waiter {
    let resolveNext!: () => void;
    const next = new Promise<void>((resolve) => (resolveNext = resolve));
    const waiter: Waiter = {
      tenantId,
      seq,
      next,
      resolve: () => {
        clearTimeout(timer);
        done.removeEventListener('abort', waiter.resolve);
        this.waiting.delete(waiter);
        resolveNext();
      },
    };
    const timer = setTimeout(waiter.resolve, this.o.safetyReadMs ?? SAFETY_READ_MS);
    done.addEventListener('abort', waiter.resolve, { once: true });
    this.waiting.add(waiter);
    return waiter;
  }

  private wakeUp(which: (w: Waiter) => boolean): void {
    for (const w of [...this.waiting]) if (which(w)) w.resolve();
  }

  /**
   * A write hint (a commit of any tenant, by any replica): one read of each waiting tenant's newest place, then only
   * its streams behind that place read. Hints during those reads are folded into one more round after them. A
   * tenant whose place cannot be read wakes all its streams, which read (and meet the failure) themselves.
   */
  private async onHint(): Promise<void> {
    if (this.looking) {
      this.hintAgain = true;
      return;
    }
    this.looking = true;
    try {
      do {
        this.hintAgain = false;
        const tenants = new Set([...this.waiting].map((w) => w.tenantId));
        await Promise.all(
          [...tenants].map(async (tenantId) => {
            const newest = await this.o.log.newestPlace(tenantId).catch(() => Infinity);
            this.wakeUp((w) => w.tenantId === tenantId && w.seq < newest);
          }),
        );
      } while (this.hintAgain && !this.ending.signal.aborted);
    } finally {
      this.looking = false;
    }
  }

  /** Write hints are followed only while some stream is open (idle means idle). */
  private opened(): void {
    if (this.open++ === 0 && !this.ending.signal.aborted) this.unwake = this.o.wake(() => void this.onHint());
  }

  private closed(): void {
    if (--this.open === 0) {
      this.unwake?.();
      this.unwake = null;
    }
  }
}
