/**
 * The storage port. Deliberately narrow so that SQLite and MongoDB both implement it naturally:
 * insert, get, equality lookups on declared fields, cursor pagination on one sort field, conditional
 * update, delete and transactions. No general query language.
 */

export type Scalar = string | number | boolean | null;

/**
 * Equality conditions on top-level fields. `null` matches a missing or null field. Values must be scalars (an
 * object is refused: it could be a MongoDB operator) and `undefined` is refused rather than ignored, so a
 * missing tenant id can never widen a query. Field names must match /^[A-Za-z_][A-Za-z0-9_]*$/.
 */
export type Where<T> = { [K in keyof T]?: T[K] extends Scalar | undefined ? T[K] | null : never };

/**
 * A non-unique index is stored as (fields..., sortField, id) so that `find` on those fields pages from the index;
 * `{ fields: [] }` gives the sort-only index for unfiltered lists. Declare one whose fields are exactly the `where`
 * fields of each list query: extra fields between them and the sort field would leave the sort to memory.
 * A unique index does not constrain documents that lack one of its fields. An explicit null in a unique field is
 * refused on every write (SQLite would let nulls repeat, MongoDB would count them): leave the field out instead.
 */
export interface IndexDef<T> {
  fields: Array<keyof T & string>;
  unique?: boolean;
}

export interface CollectionDef<T extends { id: string }> {
  /** Table or collection name; unique within one store. */
  name: string;
  /** Indexes to create. Declare one that starts with the `where` fields of each list query. */
  indexes?: IndexDef<T>[];
  /** Field that orders `find` results (ties broken by id). Default `createdAt`. */
  sortField?: keyof T & string;
  /**
   * Indexes an earlier release declared and this one no longer uses: start-up drops them (MongoDB; SQLite keeps
   * them), after creating every declared index. List one only in a release after the one that stopped declaring
   * it, so that no replica of a version still running relies on it (docs/decisions.md 54). Give `sortField` when
   * the collection sorted by another field back then (it is part of a list index).
   */
  retiredIndexes?: Array<IndexDef<T> & { sortField?: string }>;
}

export interface FindOptions {
  /** Page size, 1..1000. Default 20. */
  limit?: number;
  /** Opaque cursor from a previous page's `nextCursor`. */
  cursor?: string | null;
  /** Default `desc`: newest first. */
  order?: 'asc' | 'desc';
  /**
   * Only what a majority of replicas holds (MongoDB read concern `majority`): never a write that a failover could
   * still roll back. For reads whose result leaves the store, such as the outbox relay's. Without effect in a
   * transaction (its snapshot is majority-committed) and on SQLite (one copy).
   */
  durable?: boolean;
  /**
   * Bounds on the sort field (each exclusive or inclusive), served by the same index as the page: a window of time
   * (`{ gt: after, lt: before }`), or everything older than a cut-off for a sweep. A document without a sort value
   * is never in a range. Give values of the type the sort field holds (engines order mixed types differently).
   */
  range?: SortRange;
}

/** At most one lower bound (`gt` or `gte`) and one upper bound (`lt` or `lte`), none of them null. */
export interface SortRange {
  gt?: string | number;
  gte?: string | number;
  lt?: string | number;
  lte?: string | number;
}

export interface Page<T> {
  items: T[];
  /** Cursor for the next page, or null when this is the last page. */
  nextCursor: string | null;
}

/**
 * Documents are plain JSON values (no Date, Buffer or class instances) so that both engines return the same. A
 * field set to `undefined` is not stored (as JSON.stringify leaves it out): it reads back absent, matches `null`
 * in a `where`, never collides on a unique index and counts from zero in `increment`.
 */
export interface Collection<T extends { id: string }> {
  /** Inserts a new document. Throws DuplicateKeyError on a unique index or id clash. */
  insert(doc: T): Promise<T>;
  /** The document with this id, if it also matches `where` (use it for the tenant filter). */
  get(id: string, where?: Where<T>): Promise<T | null>;
  findOne(where: Where<T>): Promise<T | null>;
  /** One page ordered by `sortField` then id. Cost does not grow with the collection given a matching index. */
  find(where: Where<T>, options?: FindOptions): Promise<Page<T>>;
  /**
   * Applies `patch` (top-level fields; `undefined` values are ignored) to the document with this id when it
   * matches `where`; returns the updated document, or null when nothing matched. This is the compare-and-set
   * primitive: put the expected state in `where`.
   */
  update(id: string, where: Where<T>, patch: Partial<T>): Promise<T | null>;
  /**
   * Adds `by` to numeric fields of the matching document atomically; a missing or null field counts from zero.
   * Returns the updated document or null.
   */
  increment(id: string, where: Where<T>, by: Partial<Record<keyof T & string, number>>): Promise<T | null>;
  /** Deletes the document with this id when it matches `where`; true when one was deleted. */
  delete(id: string, where?: Where<T>): Promise<boolean>;
  /** Deletes every document matching `where`; returns how many. */
  deleteMany(where: Where<T>): Promise<number>;
  count(where: Where<T>): Promise<number>;
}

/** What a transaction callback sees: the same collections, bound to the transaction. */
export interface StoreSession {
  collection<T extends { id: string }>(def: CollectionDef<T>): Collection<T>;
}

export interface Store extends StoreSession {
  readonly kind: 'sqlite' | 'mongodb';
  /**
   * Runs `fn` atomically: every write inside commits together or not at all. Keep it short.
   *
   * Inside `fn` only `tx`'s collections belong to the transaction: pass `tx` down to whatever `fn` calls. A
   * store-level operation or a nested `transaction()` called from there does not join it (on SQLite it waits for it
   * and fails after the lock wait limit; test runs refuse it at once): see tx-flow.ts.
   *
   * A DuplicateKeyError inside a transaction dooms it, on every adapter (MongoDB aborts the transaction on the
   * server at once): every write of the transaction is rolled back, any later operation in it throws that error
   * again, and `transaction()` rejects with it even when the callback caught it. Catch DuplicateKeyError outside
   * `transaction()`, and retry the whole transaction when another writer may have won the key.
   */
  transaction<R>(fn: (tx: StoreSession) => Promise<R>): Promise<R>;
  /**
   * Creates the collection's indexes; call once per definition at start-up (otherwise first use does it).
   * Generic so that a typed definition is accepted (`CollectionDef<Item>` is not a `CollectionDef<{ id }>`).
   */
  ensure<T extends { id: string }>(def: CollectionDef<T>): Promise<void>;
  ping(): Promise<void>;
  /**
   * Calls `hint` soon after any connection commits a write to this store (at most every 200 ms), so that work other
   * replicas create is found without polling: a write notice on SQLite (inotify on its WAL), a change stream on
   * MongoDB. Hints only: one can be missed (keep a slow safety poll beside), and this process's own writes count too.
   * Returns the function that stops it.
   */
  watchWrites(hint: () => void): () => void;
  close(): Promise<void>;
}

export class DuplicateKeyError extends Error {
  constructor(
    readonly collection: string,
    readonly fields: string[],
  ) {
    super(`duplicate key in ${collection} on ${fields.join(', ') || 'id'}`);
    this.name = 'DuplicateKeyError';
  }
}

export class InvalidCursorError extends Error {
  constructor() {
    super('cursor is not valid');
    this.name = 'InvalidCursorError';
  }
}
