/**
 * The tenant's events as they happen (CONTRACT.md 14, `GET /events/stream`): each open stream reads the tenant's
 * events after the last place it sent, in the event log's commit order (`EventLog.after`), so a stream resumed after
 * event E sends every event committed after E once, with no gap and no duplicate, whichever replica appended them and
 * whatever their clocks say. It reads again when this replica commits events of the tenant (`EventLog.onAppended`),
 * when the store reports a commit by any replica (`wake`, a hint), and every SAFETY_READ_MS whatever happens.
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
  resolve: () => void;
}

export class EventStreams {
  private readonly waiting = new Set<Waiter>();
  /** Ends every open stream (the service is stopping: its streams must not hold the drain). */
  private readonly ending = new AbortController();
  private open = 0;
  private unwake: (() => void) | null = null;
  private readonly unlisten: () => void;

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
        const next = this.nextReason(tenantId, done);
        for (;;) {
          const page = await log.after(tenantId, seq, PAGE);
          for (const event of page.events) {
            if (done.aborted) return;
            await send(event);
          }
          seq = page.lastSeq;
          if (page.events.length < PAGE) break;
        }
        await next;
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

  /** Resolves at the next reason to read the tenant's events: an append, a write hint, the safety read, or the end. */
  private nextReason(tenantId: string, done: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      const waiter: Waiter = {
        tenantId,
        resolve: () => {
          clearTimeout(timer);
          done.removeEventListener('abort', waiter.resolve);
          this.waiting.delete(waiter);
          resolve();
        },
      };
      const timer = setTimeout(waiter.resolve, this.o.safetyReadMs ?? SAFETY_READ_MS);
      done.addEventListener('abort', waiter.resolve, { once: true });
      this.waiting.add(waiter);
    });
  }

  private wakeUp(which: (w: Waiter) => boolean): void {
    for (const w of [...this.waiting]) if (which(w)) w.resolve();
  }

  /** Write hints are followed only while some stream is open (idle means idle). */
  private opened(): void {
    if (this.open++ === 0 && !this.ending.signal.aborted) this.unwake = this.o.wake(() => this.wakeUp(() => true));
  }

  private closed(): void {
    if (--this.open === 0) {
      this.unwake?.();
      this.unwake = null;
    }
  }
}
