/**
 * A consumer that subscribes in the background. A service serves first and subscribes afterwards, retrying with
 * backoff while the bus is unreachable, so a service started during a broker outage serves its callers (degraded:
 * its events are consumed once the broker is back) instead of crash-looping. The group's position is on the bus,
 * so nothing published meanwhile is missed: the consumer starts from its committed offsets.
 */
import type { EventBus, SubscribeOptions, Subscription } from './types';

export interface BackgroundSubscriptionOptions {
  /** A failed attempt; another follows after `delayMs`. */
  onRetry?: (err: unknown, attempt: number, delayMs: number) => void;
  onSubscribed?: () => void;
  /** An error no retry can mend (a missing topic that must not be created): attempts stop and `failed` rejects. */
  isFatal?: (err: unknown) => boolean;
  /** First retry delay, doubling to `maxDelayMs` (each with up to 20% random extra, so replicas spread). */
  minDelayMs?: number;
  maxDelayMs?: number;
}

export class BackgroundSubscription {
  private subscription: Subscription | null = null;
  private stopped = false;
  private running: Promise<void> = Promise.resolve();
  private sleeping: { wake: () => void } | null = null;
  private fail: (err: unknown) => void = () => {};
  /** Rejects with the error when it was fatal; never resolves. */
  readonly failed: Promise<never>;

  constructor(
    private readonly bus: EventBus,
    readonly subscribe: SubscribeOptions,
    private readonly options: BackgroundSubscriptionOptions = {},
  ) {
    this.failed = new Promise<never>((_, reject) => (this.fail = reject));
    this.failed.catch(() => {}); // a caller that does not listen must not see an unhandled rejection
  }

  /** Whether the consumer runs. */
  get subscribed(): boolean {
    return this.subscription !== null;
  }

  start(): void {
    this.running = this.run();
  }

  /** Stops retrying (an attempt in flight is awaited, then undone) and stops the consumer. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.sleeping?.wake();
    await this.running;
    const subscription = this.subscription;
    this.subscription = null;
    await subscription?.stop();
  }

  private async run(): Promise<void> {
    const min = this.options.minDelayMs ?? 500;
    const max = this.options.maxDelayMs ?? 10_000;
    for (let attempt = 1; !this.stopped; attempt++) {
      try {
        const subscription = await this.bus.subscribe(this.subscribe);
        if (this.stopped) {
          await subscription.stop();
          return;
        }
        this.subscription = subscription;
        this.options.onSubscribed?.();
        return;
      } catch (err) {
        if (this.stopped) return;
        if (this.options.isFatal?.(err)) {
          this.fail(err);
          return;
        }
        const delay = Math.round(Math.min(min * 2 ** (attempt - 1), max) * (1 + Math.random() * 0.2));
        this.options.onRetry?.(err, attempt, delay);
        await this.sleep(delay);
      }
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((done) => {
      const wake = () => {
        clearTimeout(timer);
        this.sleeping = null;
        done();
      };
      const timer = setTimeout(wake, ms);
      this.sleeping = { wake };
    });
  }
}
