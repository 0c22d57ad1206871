/**
 * Sends the email outbox (outbox.ts): at least once, never lost, and in the normal case once even with several
 * identity replicas. Each email is claimed before it is sent (a compare-and-set that bumps its claim generation),
 * and deleted after the send only while the claim is still this process's. A claim is taken over when its holder is
 * known gone (a process of this host that died: kit holderIsGone, so a restart after a crash sends at once) or when
 * this process has itself seen its beat unchanged for `leaseMs` on its own monotonic clock (kit LeaseWatch, the
 * outbox relay's rule); never by comparing times written by another machine. A send that a crash cut short is sent
 * again by the next holder with the same Message-ID.
 */
import {
  holderIsGone,
  holderStarted,
  holderStopped,
  LeaseWatch,
  type Logger,
  monotonicNow,
  newHolderId,
  pages,
  type Store,
} from '@svc/kit';
import { emailOutbox, type EmailDoc } from './outbox';
import type { SendEmail } from './transport';

export interface EmailSenderOptions {
  store: Store;
  send: SendEmail;
  logger: Logger;
  /** How long a claim may stand still before another process takes it over. */
  leaseMs: number;
  /** Safety poll for emails committed by other replicas without a wake hint. */
  pollMs?: number;
  now?: () => number;
}

const BATCH = 20;
const MAX_RETRY_DELAY_MS = 5 * 60_000;

export class EmailSender {
  private readonly owner = newHolderId();
  private readonly watch: LeaseWatch;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | null = null;
  private again = false;
  private stopped = false;
  private unwake: (() => void) | null = null;

  constructor(private readonly o: EmailSenderOptions) {
    this.watch = new LeaseWatch(o.now ?? monotonicNow);
  }

  start(wake?: (hint: () => void) => () => void): void {
    holderStarted(this.owner);
    this.timer = setInterval(() => this.notify(), this.o.pollMs ?? 1000);
    this.timer.unref();
    this.unwake = wake?.(() => this.notify()) ?? null;
    this.notify();
  }

  /** Call after committing an email: sends it now instead of at the next poll. */
  notify(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.drain()
      .catch((err: unknown) => this.o.logger.warn({ err }, 'sending emails failed; retrying'))
      .finally(() => {
        this.running = null;
        if (this.again) {
          this.again = false;
          this.notify();
        }
      });
  }

  private stopping: Promise<void> | null = null;

  /** Stops sending and waits for a send in progress; called again (beforeStop, then onStop), the same wait. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.stopped = true;
      clearInterval(this.timer);
      this.unwake?.();
      await this.running;
      holderStopped(this.owner);
    })();
    return this.stopping;
  }

  private async drain(): Promise<void> {
    for await (const page of pages(this.o.store.collection(emailOutbox), {}, { order: 'asc', limit: BATCH, durable: true }))
      for (const doc of page) {
        if (this.stopped) return;
        const claimed = await this.claim(doc);
        if (claimed) await this.deliver(claimed);
      }
  }

  /** The email claimed for this process, or null when it is not due or another live process holds it. */
  private async claim(doc: EmailDoc): Promise<EmailDoc | null> {
    if (doc.retryAtMs > Date.now()) return null;
    const held = doc.claimOwner !== null && doc.claimOwner !== this.owner;
    if (held && !holderIsGone(doc.claimOwner!) && !this.watch.stale(doc.id, `${doc.claimGen}.${doc.claimBeat}`, this.o.leaseMs))
      return null;
    this.watch.forget(doc.id);
    return this.o.store
      .collection(emailOutbox)
      .update(doc.id, { claimGen: doc.claimGen, claimBeat: doc.claimBeat }, { claimOwner: this.owner, claimGen: doc.claimGen + 1 });
  }

  private async deliver(doc: EmailDoc): Promise<void> {
    const col = this.o.store.collection(emailOutbox);
    const fence = { claimOwner: this.owner, claimGen: doc.claimGen };
    // A slow server must not look like a dead holder: beat while the send is in flight.
    const beat = setInterval(() => void col.increment(doc.id, fence, { claimBeat: 1 }).catch(() => undefined), this.o.leaseMs / 3);
    try {
      await this.o.send(doc);
    } catch (err) {
      const delay = Math.min(1000 * 2 ** doc.attempts, MAX_RETRY_DELAY_MS);
      this.o.logger.warn(
        { err, emailId: doc.id, attempts: doc.attempts + 1, retryInMs: delay },
        'an email was not sent; it is tried again',
      );
      await col.update(doc.id, fence, { claimOwner: null, attempts: doc.attempts + 1, retryAtMs: Date.now() + delay });
      return;
    } finally {
      clearInterval(beat);
    }
    // Sent: gone from the outbox (a lost claim deletes nothing; its new holder sends again, same Message-ID).
    await col.delete(doc.id, fence);
  }
}
