/**
 * Exact per-tenant caps (docs/decisions.md 52). One counter document per (kind, tenant) is changed in the same
 * transaction as the insert or delete it counts: a create adds one, and past the limit the whole transaction rolls
 * back with the refusal; a delete gives back what it removed. Concurrent creates all write the same counter
 * document, so they conflict (SQLite runs one writer at a time, MongoDB aborts and retries all but one): no number
 * of replicas can pass the cap, and a count never refuses a place that is free.
 *
 * A tenant whose data predates its counter has none: the first create or delete starts it, in a transaction of its
 * own, from a count of the data. That count is exact because every writer of the counted data needs the counter in
 * its own transaction (its write is refused until the counter exists), and two starts collide on the counter's id.
 */
import { AppError, errors } from './errors';
import { nowIso } from './ids';
import { DuplicateKeyError, type CollectionDef, type Store, type StoreSession } from './storage';

export interface CapCounterDoc {
  /** `<kind>:<tenantId>` */
  id: string;
  count: number;
  createdAt: string;
}

/** Every service keeps its counters in its own store (declare it with the service's collections). */
export const capCounters: CollectionDef<CapCounterDoc> = { name: 'cap_counters' };

export interface CapDef {
  /** Names the counter, and the refusal's reason: `<kind>_limit`. */
  kind: string;
  /** For the refusal's message: "at most 1000 projects". */
  plural: string;
  limit: number;
  /** What frees a place, for the message (default `delete`). */
  free?: string;
  /** Counts what the cap holds for a tenant from the data itself (in the given transaction): starts its counter. */
  count(tx: StoreSession, tenantId: string): Promise<number>;
  /** The refusal past the limit (default 409 CONFLICT `<kind>_limit` with `{reason, limit}`). */
  refuse?: (limit: number) => AppError;
}

/** A tenant's places under one cap, inside a transaction. */
export interface Places {
  /** Takes one place; throws the refusal when none is left (the transaction then writes nothing). */
  take(): Promise<void>;
  /** Gives back `n` places (default 1): call it for what the transaction removed from what the cap counts. */
  free(n?: number): Promise<void>;
}

/** Thrown inside the transaction when the tenant's counter does not exist yet: rolled back, started, run again. */
class NoCounter extends Error {
  constructor() {
    super('the cap counter does not exist yet');
  }
}

export function capReached(limit: number, kind: string, plural: string, free = 'delete'): AppError {
  return errors.conflict(`A tenant can have at most ${limit} ${plural}; ${free} one first`, { reason: `${kind}_limit`, limit });
}

export class TenantCap {
  constructor(
    private readonly store: Store,
    readonly def: CapDef,
  ) {}

  /**
   * Runs `fn` in a transaction with the tenant's places under this cap: `places.take()` before an insert the cap
   * counts, `places.free()` after a delete. Every write that changes what the cap counts must go through here.
   */
  async transaction<R>(tenantId: string, fn: (tx: StoreSession, places: Places) => Promise<R>): Promise<R> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.store.transaction((tx) => fn(tx, this.places(tx, tenantId)));
      } catch (err) {
        // Twice at most: once started, a counter is never removed.
        if (!(err instanceof NoCounter) || attempt >= 3) throw err;
        await this.start(tenantId);
      }
    }
  }

  /** An early refusal before costly work (a password hash) when the cap is already full; the transaction decides. */
  async refuseWhenFull(tenantId: string): Promise<void> {
    const used = await this.used(tenantId);
    if (used !== null && used >= this.def.limit) throw this.refusal();
  }

  /** The tenant's counter as stored (null before its first create or delete); for tests and diagnostics. */
  async used(tenantId: string): Promise<number | null> {
    return (await this.store.collection(capCounters).get(this.counterId(tenantId)))?.count ?? null;
  }

  private refusal(): AppError {
    const { limit, kind, plural, free, refuse } = this.def;
    return refuse ? refuse(limit) : capReached(limit, kind, plural, free);
  }

  private counterId(tenantId: string): string {
    return `${this.def.kind}:${tenantId}`;
  }

  /** The tenant's places in a transaction already open (one `transaction` runs, e.g. through kit `idempotent`). */
  places(tx: StoreSession, tenantId: string): Places {
    const counters = tx.collection(capCounters);
    const id = this.counterId(tenantId);
    return {
      take: async () => {
        const counter = await counters.increment(id, {}, { count: 1 });
        if (!counter) throw new NoCounter();
        if (counter.count > this.def.limit) throw this.refusal();
      },
      free: async (n = 1) => {
        if (n === 0) return;
        if (!(await counters.increment(id, {}, { count: -n }))) throw new NoCounter();
      },
    };
  }

  /** Starts the tenant's counter from a count of its data, unless another process has just done so. */
  private async start(tenantId: string): Promise<void> {
    const id = this.counterId(tenantId);
    try {
      await this.store.transaction(async (tx) => {
        const counters = tx.collection(capCounters);
        if (await counters.get(id)) return;
        await counters.insert({ id, count: await this.def.count(tx, tenantId), createdAt: nowIso() });
      });
    } catch (err) {
      if (!(err instanceof DuplicateKeyError)) throw err; // else another replica started it first: it is there now
    }
  }
}
