/**
 * An API key's concurrency limit (CONTRACT.md 8, the `kcc` claim identity puts in the key's tokens): how many runs
 * or replies of the key a service lets be unfinished at once. The service counts them in its store, in the
 * transaction that inserts the new one, and writes the key's guard document in that transaction too: on SQLite
 * (BEGIN IMMEDIATE) writers take turns anyway, and on MongoDB concurrent admissions of one key all write the same
 * document, so all but one abort and retry with the others' inserts in view. No replica can pass the limit.
 */
import { AppError } from './errors';
import type { AuthClaims } from './jwt';
import { nowIso } from './ids';
import { capCounters } from './caps';
import { DuplicateKeyError, type Store, type StoreSession } from './storage';

export interface KeySlotsDef {
  /** For the refusal's message: "runs", "replies". */
  plural: string;
  /** How many of the key's items are unfinished (counting up to `limit` is enough), in the transaction. */
  count(tx: StoreSession, tenantId: string, keyId: string, limit: number): Promise<number>;
}

export class KeySlots {
  constructor(
    private readonly store: Store,
    private readonly def: KeySlotsDef,
  ) {}

  /** Before the transaction: the key's guard document exists (created once, outside any transaction). */
  async prepare(auth: AuthClaims): Promise<void> {
    if (!limitOf(auth)) return;
    try {
      await this.store.collection(capCounters).insert({ id: guardId(auth), count: 0, createdAt: nowIso() });
    } catch (err) {
      if (!(err instanceof DuplicateKeyError)) throw err;
    }
  }

  /** Inside the transaction that inserts the new run or reply: refuses with 429 when the key has no place left. */
  async take(tx: StoreSession, auth: AuthClaims): Promise<void> {
    const limit = limitOf(auth);
    if (!limit) return;
    await tx.collection(capCounters).increment(guardId(auth), {}, { count: 1 });
    if ((await this.def.count(tx, auth.tid, auth.sid, limit)) >= limit)
      throw new AppError('RATE_LIMIT_EXCEEDED', `This API key may have at most ${limit} ${this.def.plural} at once; retry when one ends`, {
        reason: 'key_concurrency',
        limit,
        retryAfterS: 1,
      });
  }
}

const limitOf = (auth: AuthClaims) => (auth.typ === 'api_key' ? auth.kcc : undefined);
const guardId = (auth: AuthClaims) => `key_slots:${auth.sid}`;
