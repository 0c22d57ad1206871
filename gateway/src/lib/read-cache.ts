import { metrics } from '@svc/kit';
import type { identityV1 } from '@svc/proto';

/**
 * Hot reads answered by the gateway itself, each dropped as soon as the gateway reads in its owner's feed that the
 * record changed (identity's feed for tenants, projects' feed for projects), and at once by the gateway's own
 * writes. So a cached answer is never older than the newest change this gateway has read, and the feed is read
 * within moments of every change (the owner's notice stream; polling while that is down). While the feed cannot be
 * read, nothing is answered from the cache.
 *
 * Two rules keep a slow answer from replacing a newer one:
 * - every drop bumps a generation, and a load keeps its result only when the generation it started under is still
 *   current (a change overtook it: the answer serves its own caller, as any read in flight may, and is not kept);
 * - a load replaces a kept answer only when it started after the load that kept it (reads that start later see
 *   the owner's state at least as new), so reads through one gateway never go back to an older value.
 */
export class ReadCache<V> {
  private readonly entries = new Map<string, { value: V; until: number; loadSeq: number }>();
  private generation = 0;
  /** Numbers loads in the order they start. */
  private loads = 0;
  /** Bound once: a label lookup per read would cost more than the hit. */
  private readonly counted: Record<'hit' | 'miss' | 'bypass', { inc(): void }>;

  constructor(
    private readonly options: {
      /** Names the cache in metrics. */
      name: string;
      /** A safety net only: changes drop entries at once. */
      ttlMs: number;
      maxEntries: number;
      /** Whether the feed that drops entries is being read (the last read succeeded). */
      current: () => boolean;
    },
  ) {
    const counter = (outcome: string) => metrics.readCache.labels(options.name, outcome);
    this.counted = { hit: counter('hit'), miss: counter('miss'), bypass: counter('bypass') };
  }

  async get(key: string, load: () => Promise<V>): Promise<V> {
    const current = this.options.current();
    if (current) {
      const hit = this.entries.get(key);
      if (hit && hit.until > Date.now()) {
        this.counted.hit.inc();
        return hit.value;
      }
      this.counted.miss.inc();
    } else {
      this.counted.bypass.inc();
      this.entries.clear();
    }
    const generation = this.generation;
    const loadSeq = ++this.loads;
    const value = await load();
    const kept = this.entries.get(key);
    if (current && generation === this.generation && this.options.current() && !(kept && kept.loadSeq > loadSeq)) {
      if (!kept && this.entries.size >= this.options.maxEntries) this.entries.delete(this.entries.keys().next().value!);
      this.entries.set(key, { value, until: Date.now() + this.options.ttlMs, loadSeq });
    }
    return value;
  }

  /** The record changed: the next read loads it again, and no load in flight now is kept. */
  drop(key: string): void {
    this.generation++;
    this.entries.delete(key);
  }

  get size(): number {
    return this.entries.size;
  }
}

/** The caches of the gateway: GET /tenant by tenant id, GET /projects/:id by `<tenant id>/<project id>`. */
export interface ReadCaches {
  tenants: ReadCache<identityV1.Tenant>;
  projects: ReadCache<unknown>;
}
