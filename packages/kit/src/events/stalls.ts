import { metrics } from '../metrics';
import type { StalledConsumer } from './types';

/**
 * The messages one subscription is retrying because a dependency is unavailable, by slot (a Kafka partition; the
 * embedded consumer has one slot). Kept for health (`EventBus.stalled()`) and the `svc_bus_consumer_stalled` gauge.
 */
export class Stalls {
  private readonly slots = new Map<string, StalledConsumer>();

  constructor(private readonly group: string) {}

  /** A call of the message at `offset` failed on a dependency: it stays (or becomes) stalled. */
  failed(slot: string, topic: string, offset: string, err: unknown): void {
    const prev = this.slots.get(slot);
    const error = String((err as Error)?.message ?? err).slice(0, 200);
    if (prev && prev.topic === topic && prev.offset === offset) {
      prev.attempts++;
      prev.error = error;
      return;
    }
    if (prev) this.cleared(slot);
    this.slots.set(slot, { group: this.group, topic, offset, attempts: 1, since: Date.now(), error });
    metrics.busStalled.inc({ topic, group: this.group });
  }

  /** The slot moved on (its message succeeded or was dead-lettered) or is no longer ours. */
  cleared(slot: string): void {
    const prev = this.slots.get(slot);
    if (!prev) return;
    this.slots.delete(slot);
    metrics.busStalled.dec({ topic: prev.topic, group: this.group });
  }

  clearAll(): void {
    for (const slot of [...this.slots.keys()]) this.cleared(slot);
  }

  list(): StalledConsumer[] {
    return [...this.slots.values()].map((s) => ({ ...s }));
  }
}
