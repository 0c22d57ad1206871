/**
 * An API key's concurrency limit (CONTRACT.md 8, the `kcc` claim identity puts in the key's tokens): how many runs
 * or replies of the key a service lets be unfinished at once. The service counts them in its store, in the
 * transaction that inserts the new one, and writes the key's guard document in that transaction too: on SQLite
 * (BEGIN IMMEDIATE) writers take turns anyway, and on MongoDB concurrent admissions of one key all write the same
 * document, so all but one abort and retry with the others' inserts in view. No replica can pass the limit.
 */
import {
  AppError,
  capCounters,
  DuplicateKeyError,
  nowIso,
  type AuthClaims,
  type CollectionDef,
  type Store,
  type StoreSession,
  type Where,
} from '@svc/kit';

/** The items a key's slots count: a tenant's documents naming the key as `credentialId`, with a `status`. */
interface KeyedItem {
  id: string;
  tenantId: string;
  credentialId?: string | null;
  status: string;
}

export interface KeySlotsDef<T extends KeyedItem> {
  /** For the refusal's message: "runs in progress", "replies being generated". */
  plural: string;
  collection: CollectionDef<T>;
  /** The statuses of an unfinished item, the ones that hold a place. */
  unfinished: readonly T['status'][];
}

export class KeySlots<T extends KeyedItem = KeyedItem> {
  constructor(
    private readonly store: Store,
    private readonly def: KeySlotsDef<T>,
  ) {}

  /** Whether the caller's key has a concurrency limit (else `take` does nothing and never refuses). */
  limited(auth: AuthClaims): boolean {
    return limitOf(auth) !== undefined;
  }

  /** Before the transaction: the key's guard document exists (created once, outside any transaction). */
  async prepare(auth: AuthClaims): Promise<void> {
    if (limitOf(auth)) await ensureGuard(this.store, guardId(auth));
  }

  /** Inside the transaction that inserts the new run or reply: refuses with 429 when the key has no place left. */
  async take(tx: StoreSession, auth: AuthClaims): Promise<void> {
    const limit = limitOf(auth);
    if (!limit) return;
    await tx.collection(capCounters).increment(guardId(auth), {}, { count: 1 });
    if ((await this.unfinished(tx, auth.tid, auth.sid, limit)) >= limit)
      throw new AppError('RATE_LIMIT_EXCEEDED', `This API key may have at most ${limit} ${this.def.plural} at once; retry when one ends`, {
        reason: 'key_concurrency',
        limit,
        retryAfterS: 1,
      });
  }

  /** The key's unfinished items, counted up to `limit` (enough to decide). */
  private async unfinished(tx: StoreSession, tenantId: string, keyId: string, limit: number): Promise<number> {
    let n = 0;
    for (const status of this.def.unfinished) {
      const where = { tenantId, credentialId: keyId, status } as unknown as Where<T>;
      n += (await tx.collection(this.def.collection).find(where, { limit })).items.length;
    }
    return n;
  }
}

const limitOf = (auth: AuthClaims) => (auth.typ === 'api_key' ? auth.kcc : undefined);
const guardId = (auth: AuthClaims) => `key_slots:${auth.sid}`;

/**
 * Creates a guard document (a counter that admissions write in their transaction, so concurrent ones take turns) if
 * it is not there yet; outside any transaction.
 */
export async function ensureGuard(store: Store, id: string): Promise<void> {
  let known = guardsSeen.get(store);
  if (!known) guardsSeen.set(store, (known = new Set()));
  if (known.has(id)) return;
  try {
    await store.collection(capCounters).insert({ id, count: 0, createdAt: nowIso() });
  } catch (err) {
    if (!(err instanceof DuplicateKeyError)) throw err;
  }
  if (known.size >= GUARDS_REMEMBERED) known.clear();
  known.add(id);
}

/**
 * The guards this process created or found, per store. A guard is never deleted, so each is written once per
 * process, not tried again (a failed insert: a write and an exception) on every admission.
 */
const guardsSeen = new WeakMap<Store, Set<string>>();
const GUARDS_REMEMBERED = 100_000;
