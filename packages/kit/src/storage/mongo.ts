/**
 * Storage port on MongoDB through mongoose's connection (the driver underneath; no mongoose models). One
 * database per service; a document is stored with `_id` = its id and read back with `id`.
 *
 * `where` values come from user input: only scalars are accepted (an object could be an operator such as
 * `{ $gt: '' }`), ids must be strings, and field names are validated identifiers, so no key is ever built
 * from user input.
 *
 * Documents and patch values are written as their JSON form, exactly what SQLite stores: a field set to
 * `undefined` is left out rather than stored as null (the driver's default), so reads, unique indexes and
 * `increment` see the same document on both engines.
 *
 * Transactions need a replica set (a single-node one is enough: `mongod --replSet rs0` + `rs.initiate()`); on a
 * standalone server `transaction()` fails with "Transaction numbers are only allowed on a replica set member".
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { createHash } from 'node:crypto';
import mongoose from 'mongoose';
import {
  assertId,
  assertNoNullInUnique,
  incrementEntries,
  patchEntries,
  schemaOf,
  sortValueOf,
  whereEntries,
  type AnyDef,
  type Schema,
} from './common';
import { clampLimit, decodeCursor, pageSegments, toPage } from './cursor';
import { debounced } from './watch-writes';
import {
  DuplicateKeyError,
  type Collection,
  type CollectionDef,
  type FindOptions,
  type Page,
  type Store,
  type StoreSession,
  type Where,
} from './types';

type Doc = { id: string };
/** Stored shape: the document without `id`, plus `_id`. */
type MongoDoc = { _id: string; [field: string]: unknown };
type Filter = mongoose.mongo.Filter<MongoDoc>;
type ClientSession = mongoose.mongo.ClientSession;

/** How long start-up and every operation wait for a reachable primary before failing (driver default: 30 s). */
const SERVER_SELECTION_TIMEOUT_MS = 5000;
/** ping() answers within this, reachable or not, so a health probe never hangs. */
const PING_TIMEOUT_MS = 3000;

/**
 * Majority on both sides: a transaction reads a snapshot of majority-committed data and is acknowledged only once
 * a majority has it, so a committed write survives a failover and no replica reads state that could roll back.
 */
const TRANSACTION_OPTIONS: mongoose.mongo.TransactionOptions = {
  readConcern: { level: 'snapshot' },
  writeConcern: { w: 'majority' },
  readPreference: 'primary',
};

/** Server error codes met while creating indexes. */
const NAMESPACE_NOT_FOUND = 26;
const INDEX_CONFLICTS = new Set([85 /* IndexOptionsConflict */, 86 /* IndexKeySpecsConflict */]);

/** The MongoDB key for a (validated) field name. */
const key = (field: string) => (field === 'id' ? '_id' : field);

/** What SQLite stores for a value: its JSON form (undefined fields left out, NaN as null). */
function plain<V>(value: V): V {
  return value === undefined ? value : (JSON.parse(JSON.stringify(value)) as V);
}

function filterOf(where: object | undefined): Record<string, unknown> {
  return Object.fromEntries(whereEntries(where).map(([field, value]) => [key(field), value]));
}

/** The document with this id that also matches `where` (which may name `id` itself). */
function byId(id: string, where: object | undefined): Filter {
  const filter = filterOf(where);
  return '_id' in filter ? { $and: [{ _id: id }, filter] } : { ...filter, _id: id };
}

function fromMongo<T>(doc: MongoDoc | null): T | null {
  if (!doc) return null;
  const { _id, ...rest } = doc;
  return { id: _id, ...rest } as T;
}

/** Maps a duplicate key error (11000) to DuplicateKeyError naming the index's fields; null for anything else. */
function asDuplicate(err: unknown, collection: string): DuplicateKeyError | null {
  const error = err as { code?: unknown; keyPattern?: Record<string, unknown> } | null;
  if (!error || error.code !== 11000) return null;
  const fields = error.keyPattern ? Object.keys(error.keyPattern).map((k) => (k === '_id' ? 'id' : k)) : ['id'];
  return new DuplicateKeyError(collection, fields);
}

/** A MongoDB index as this adapter creates it. */
export interface IndexPlan {
  name: string;
  key: Record<string, 1>;
  unique: boolean;
  partialFilterExpression?: Record<string, unknown>;
}

/**
 * How an IndexDef becomes a MongoDB index:
 * - non-unique `{ fields: [a, b] }` -> key `{ a: 1, b: 1, <sortField>: 1, _id: 1 }` (a field already listed keeps
 *   its place). `find` filters by equality on the leading fields and sorts by (sortField, _id) in one direction,
 *   so the scan walks the index forwards (asc) or backwards (desc) and never sorts in memory. The sort field and
 *   _id must share a direction: a `{ s: -1, _id: 1 }` key could serve neither `{ s: -1, _id: -1 }` nor its reverse.
 * - unique `{ fields: [a, b] }` -> key `{ a: 1, b: 1 }`, unique, partial on every field existing, so documents
 *   that lack one do not collide (as NULLs do not in SQLite). Unique on `id` alone is `_id` itself.
 * - the name is the kind, the fields and a hash of the whole definition: a changed definition is a new name,
 *   and a same-named index is known to be this very index.
 */
export function indexPlans(schema: Schema): IndexPlan[] {
  const plans: IndexPlan[] = [];
  for (const index of schema.indexes) {
    if (index.unique) {
      if (index.fields.length === 1 && index.fields[0] === 'id') continue;
      const partialFilterExpression = Object.fromEntries(index.fields.filter((f) => f !== 'id').map((f) => [f, { $exists: true }]));
      const indexKey = Object.fromEntries(index.fields.map((f) => [key(f), 1 as const]));
      plans.push(named('u', index.fields, { key: indexKey, unique: true, partialFilterExpression }));
    } else {
      const fields = [...new Set([...index.fields.map(key), key(schema.sortField), '_id'])];
      if (fields.length === 1) continue; // sorted by id alone: the _id index serves it
      plans.push(named('f', index.fields, { key: Object.fromEntries(fields.map((f) => [f, 1 as const])), unique: false }));
    }
  }
  return plans;
}

function named(kind: string, fields: string[], plan: Omit<IndexPlan, 'name'>): IndexPlan {
  const hash = createHash('sha256').update(JSON.stringify(plan)).digest('hex').slice(0, 8);
  return { name: [kind, ...fields, hash].join('_'), ...plan };
}

const sameKey = (a: Record<string, unknown>, b: Record<string, unknown>) => JSON.stringify(a) === JSON.stringify(b);

/** Whether an existing index already is this plan under another name (say one created before names were given). */
function sameIndex(existing: mongoose.mongo.IndexDescriptionInfo, plan: IndexPlan): boolean {
  return (
    sameKey(existing.key, plan.key) &&
    (existing.unique === true) === plan.unique &&
    JSON.stringify(existing.partialFilterExpression ?? null) === JSON.stringify(plan.partialFilterExpression ?? null)
  );
}

/** One query of `find` (see pageSegments); `findQueries` builds them and both `find` and `explainFind` run them. */
interface SegmentQuery {
  filter: Filter;
  sort: Record<string, 1 | -1>;
}

function findQueries(schema: Schema, where: object, options: FindOptions): SegmentQuery[] {
  const order = options.order === 'asc' ? 'asc' : 'desc';
  const cursor = options.cursor ? decodeCursor(options.cursor) : null;
  const base = filterOf(where);
  const sortKey = key(schema.sortField);
  const dir = order === 'desc' ? -1 : 1;
  const beyond = order === 'desc' ? '$lt' : '$gt';
  return pageSegments(order, cursor).map((segment) => {
    const extra: Filter[] = [];
    if (segment.nulls) {
      extra.push({ [sortKey]: null }); // null matches missing too
      if (segment.after) extra.push({ _id: { [beyond]: segment.after.id } });
    } else if (segment.after) {
      // A range on the sort field (index bounds) plus a tie-break filter on _id.
      const value = segment.after.sortValue;
      extra.push(
        { [sortKey]: { [`${beyond}e`]: value } },
        { $or: [{ [sortKey]: { [beyond]: value } }, { _id: { [beyond]: segment.after.id } }] },
      );
    } else {
      extra.push({ [sortKey]: { $ne: null } });
    }
    return { filter: { ...base, $and: extra }, sort: { [sortKey]: dir, _id: dir } };
  });
}

interface Table {
  schema: Schema;
  collection: mongoose.mongo.Collection<MongoDoc>;
  indexed: boolean;
  indexing: Promise<void> | null;
  base: MongoCollection<Doc> | null;
}

interface Tx {
  open: boolean;
  session: ClientSession;
  bound: StoreSession;
  /** Set by a duplicate key inside the transaction: the server has aborted it (see Store.transaction). */
  failure: DuplicateKeyError | null;
}

/** Where index changes are reported (a replaced or undeclared index); a service passes its logger. */
export type IndexReport = (message: string, details: Record<string, unknown>) => void;

const warnByDefault: IndexReport = (message, details) => process.emitWarning(`${message} ${JSON.stringify(details)}`);

/** Write hints come at most this often (a burst of changes is one hint). */
const WRITE_HINT_DEBOUNCE_MS = 200;
/** Pause before a failed change stream is opened again. */
const WATCH_RETRY_MS = 5000;

class MongoStore implements Store {
  readonly kind = 'mongodb' as const;
  private readonly tables = new WeakMap<object, Table>();
  private readonly context = new AsyncLocalStorage<Tx>();

  constructor(
    private readonly connection: mongoose.Connection,
    private readonly db: mongoose.mongo.Db,
    private readonly report: IndexReport,
    private readonly pingTimeoutMs: number,
  ) {}

  table(def: AnyDef): Table {
    let table = this.tables.get(def);
    if (!table) {
      const schema = schemaOf(def);
      table = { schema, collection: this.db.collection<MongoDoc>(schema.name), indexed: false, indexing: null, base: null };
      this.tables.set(def, table);
    }
    return table;
  }

  /** Creates the indexes once per definition (outside any transaction); nothing to wait for afterwards. */
  ready(table: Table): Promise<void> | undefined {
    if (table.indexed) return undefined;
    table.indexing ??= this.createIndexes(table).then(
      () => {
        table.indexed = true;
      },
      (err: unknown) => {
        table.indexing = null;
        throw err;
      },
    );
    return table.indexing;
  }

  /**
   * Creates each planned index that is not there yet. An index with the same key but other options (a definition
   * changed between versions) is dropped and replaced rather than failing start-up; indexes no definition asks
   * for are reported, not dropped (another version still running may use them). A conflict with a replica
   * creating the same index at the same moment is settled by looking again.
   */
  private async createIndexes({ schema, collection }: Table): Promise<void> {
    const plans = indexPlans(schema);
    if (plans.length === 0) return;
    let existing = await this.indexesOf(collection);
    for (const plan of plans) {
      for (let attempt = 1; ; attempt++) {
        if (existing.some((index) => index.name === plan.name || sameIndex(index, plan))) break;
        const clash = existing.find((index) => index.name !== '_id_' && sameKey(index.key, plan.key));
        if (clash?.name) {
          this.report('replacing an index whose definition changed', { collection: schema.name, dropped: clash.name, created: plan.name });
          await collection.dropIndex(clash.name).catch((err: unknown) => {
            if ((err as { code?: unknown }).code !== NAMESPACE_NOT_FOUND && (err as { code?: unknown }).code !== 27) throw err; // 27: gone already
          });
        }
        try {
          const { name, unique, partialFilterExpression } = plan;
          await collection.createIndex(plan.key, { name, ...(unique ? { unique, partialFilterExpression } : {}) });
          break;
        } catch (err) {
          if (!INDEX_CONFLICTS.has((err as { code?: number }).code ?? 0) || attempt >= 3) throw err;
          existing = await this.indexesOf(collection);
        }
      }
    }
    const declared = new Set(plans.map((plan) => plan.name));
    const undeclared = existing.filter(
      (index) => index.name !== '_id_' && !declared.has(index.name ?? '') && !plans.some((p) => sameIndex(index, p)),
    );
    if (undeclared.length > 0) {
      this.report('indexes that no definition declares (drop them once no running version needs them)', {
        collection: schema.name,
        indexes: undeclared.map((index) => index.name),
      });
    }
  }

  private async indexesOf(collection: mongoose.mongo.Collection<MongoDoc>): Promise<mongoose.mongo.IndexDescriptionInfo[]> {
    try {
      return await collection.indexes();
    } catch (err) {
      if ((err as { code?: unknown }).code === NAMESPACE_NOT_FOUND) return []; // the collection does not exist yet
      throw err;
    }
  }

  /**
   * The transaction an operation runs in: its own when made through a transaction's collections, or the open
   * transaction of the async flow it was called from (as in SQLite, an operation inside a transaction callback
   * joins it), else none.
   */
  txOf(tx: Tx | null): Tx | null {
    if (tx) {
      if (!tx.open) throw new Error('the transaction has already finished');
      return tx;
    }
    const open = this.context.getStore();
    return open?.open ? open : null;
  }

  collection<T extends Doc>(def: CollectionDef<T>): Collection<T> {
    const table = this.table(def);
    table.base ??= new MongoCollection<Doc>(this, table, null);
    return table.base as unknown as Collection<T>;
  }

  /**
   * Runs `fn` in `session.withTransaction`, which retries the whole callback on transient errors (write
   * conflicts, elections): keep side effects other than store writes out of it. A transaction started inside
   * another one's callback joins it. A duplicate key aborts it (the server already has): the DuplicateKeyError
   * is not a driver error, so withTransaction aborts and rethrows it rather than retrying.
   */
  async transaction<R>(fn: (tx: StoreSession) => Promise<R>): Promise<R> {
    const open = this.context.getStore();
    if (open?.open) return fn(open.bound);
    const session = await this.connection.startSession();
    try {
      return await session.withTransaction(async () => {
        const tx: Tx = {
          open: true,
          session,
          failure: null,
          bound: {
            collection: <T extends Doc>(def: CollectionDef<T>) =>
              new MongoCollection<Doc>(this, this.table(def), tx) as unknown as Collection<T>,
          },
        };
        try {
          const result = await this.context.run(tx, () => fn(tx.bound));
          if (tx.failure) throw tx.failure; // caught by the callback: the transaction is aborted all the same
          return result;
        } finally {
          tx.open = false;
        }
      }, TRANSACTION_OPTIONS);
    } finally {
      await session.endSession();
    }
  }

  async ensure<T extends Doc>(def: CollectionDef<T>): Promise<void> {
    await this.ready(this.table(def));
  }

  /** Answers within pingTimeoutMs: server selection alone could wait SERVER_SELECTION_TIMEOUT_MS. */
  async ping(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        this.db.command({ ping: 1 }),
        new Promise((_, fail) => {
          timer = setTimeout(() => fail(new Error(`MongoDB did not answer a ping within ${this.pingTimeoutMs} ms`)), this.pingTimeoutMs);
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * A change stream over this database (every collection): each change is a hint, debounced. A stream that fails
   * (a server without change streams, a failover) is opened again after a pause; meanwhile the callers' safety
   * polls find the work.
   */
  watchWrites(hint: () => void): () => void {
    let stopped = false;
    let stream: mongoose.mongo.ChangeStream | null = null;
    const { fire, cancel } = debounced(hint, WRITE_HINT_DEBOUNCE_MS);
    const open = () => {
      if (stopped) return;
      try {
        // Only the event's kind matters: project it away to keep the stream light.
        const opened = this.db.watch([{ $project: { operationType: 1 } }]);
        stream = opened;
        opened.on('change', () => stopped || fire());
        opened.on('error', () => {
          void opened.close().catch(() => undefined);
          if (stream === opened) stream = null;
          if (!stopped) setTimeout(open, WATCH_RETRY_MS).unref();
        });
      } catch {
        setTimeout(open, WATCH_RETRY_MS).unref();
      }
    };
    open();
    return () => {
      stopped = true;
      cancel();
      void stream?.close().catch(() => undefined);
      stream = null;
    };
  }

  async close(): Promise<void> {
    await this.connection.close();
  }

  /** The winning plan of each query `find` would run (explain 'queryPlanner'), in segment order. */
  async explainFind(def: AnyDef, where: object, options: FindOptions): Promise<unknown[]> {
    const table = this.table(def);
    await this.ready(table);
    const plans: unknown[] = [];
    for (const query of findQueries(table.schema, where, options)) {
      const explained = await table.collection
        .find(query.filter, { sort: query.sort, limit: clampLimit(options.limit) + 1 })
        .explain('queryPlanner');
      plans.push((explained as { queryPlanner?: { winningPlan?: unknown } }).queryPlanner?.winningPlan);
    }
    return plans;
  }
}

class MongoCollection<T extends Doc> implements Collection<T> {
  private readonly name: string;
  private readonly collection: mongoose.mongo.Collection<MongoDoc>;

  constructor(
    private readonly store: MongoStore,
    private readonly table: Table,
    private readonly tx: Tx | null,
  ) {
    this.name = table.schema.name;
    this.collection = table.collection;
  }

  /**
   * Runs one operation: waits for the indexes on first use, runs in the transaction it belongs to (if any), and
   * maps a duplicate key. Inside a transaction a duplicate key dooms it, and its later operations fail the same.
   */
  private async run<R>(op: (session: ClientSession | undefined) => Promise<R>): Promise<R> {
    const tx = this.store.txOf(this.tx);
    if (tx?.failure) throw tx.failure;
    const indexing = this.store.ready(this.table);
    if (indexing) await indexing;
    try {
      return await op(tx?.session);
    } catch (err) {
      const duplicate = asDuplicate(err, this.name);
      if (!duplicate) throw err;
      if (tx) tx.failure ??= duplicate;
      throw duplicate;
    }
  }

  async insert(doc: T): Promise<T> {
    assertId(doc.id);
    assertNoNullInUnique(this.table.schema, Object.entries(doc));
    const { id, ...rest } = plain(doc);
    await this.run((session) => this.collection.insertOne({ ...rest, _id: id }, { session }));
    return doc;
  }

  async get(id: string, where?: Where<T>): Promise<T | null> {
    assertId(id, { allowEmpty: true });
    const filter = byId(id, where);
    return this.run(async (session) => fromMongo<T>(await this.collection.findOne(filter, { session })));
  }

  async findOne(where: Where<T>): Promise<T | null> {
    const filter = filterOf(where);
    return this.run(async (session) => fromMongo<T>(await this.collection.findOne(filter, { session })));
  }

  async find(where: Where<T>, options: FindOptions = {}): Promise<Page<T>> {
    const limit = clampLimit(options.limit);
    const queries = findQueries(this.table.schema, where, options);
    const { sortField } = this.table.schema;
    return this.run(async (session) => {
      const rows: T[] = [];
      for (const { filter, sort } of queries) {
        const found = await this.collection.find(filter, { sort, limit: limit + 1 - rows.length, session }).toArray();
        for (const doc of found) rows.push(fromMongo<T>(doc) as T);
        if (rows.length > limit) break;
      }
      return toPage(rows, limit, (doc) => sortValueOf(doc, sortField));
    });
  }

  async update(id: string, where: Where<T>, patch: Partial<T>): Promise<T | null> {
    assertId(id, { allowEmpty: true });
    const fields = patchEntries(id, patch);
    assertNoNullInUnique(this.table.schema, fields);
    if (fields.length === 0) return this.get(id, where);
    const filter = byId(id, where);
    const set = Object.fromEntries(fields.map(([field, value]) => [field, plain(value)]));
    return this.run(async (session) =>
      fromMongo<T>(await this.collection.findOneAndUpdate(filter, { $set: set }, { returnDocument: 'after', session })),
    );
  }

  async increment(id: string, where: Where<T>, by: Partial<Record<keyof T & string, number>>): Promise<T | null> {
    assertId(id, { allowEmpty: true });
    const fields = incrementEntries(by);
    if (fields.length === 0) return this.get(id, where);
    const filter = byId(id, where);
    // An update pipeline rather than $inc, which refuses a null field: a missing or null field counts from zero,
    // as in SQLite; a non-numeric value fails in $add. Names are validated, so `$${field}` is only a field path.
    const pipeline = [
      { $set: Object.fromEntries(fields.map(([field, amount]) => [field, { $add: [{ $ifNull: [`$${field}`, 0] }, amount] }])) },
    ];
    return this.run(async (session) =>
      fromMongo<T>(await this.collection.findOneAndUpdate(filter, pipeline, { returnDocument: 'after', session })),
    );
  }

  async delete(id: string, where?: Where<T>): Promise<boolean> {
    assertId(id, { allowEmpty: true });
    const filter = byId(id, where);
    return this.run(async (session) => (await this.collection.deleteOne(filter, { session })).deletedCount > 0);
  }

  async deleteMany(where: Where<T>): Promise<number> {
    const filter = filterOf(where);
    return this.run(async (session) => (await this.collection.deleteMany(filter, { session })).deletedCount);
  }

  async count(where: Where<T>): Promise<number> {
    const filter = filterOf(where);
    return this.run((session) => this.collection.countDocuments(filter, { session }));
  }
}

export interface MongoStoreOptions {
  uri: string;
  /** Else the database named in the URI. */
  dbName?: string;
  /** Default 5000; the driver's own default (30 s) would hold start-up and every call while no primary answers. */
  serverSelectionTimeoutMS?: number;
  /** Default 3000. */
  pingTimeoutMs?: number;
  /** Index replacements and undeclared indexes; default: a process warning. */
  onIndexReport?: IndexReport;
}

export async function openMongoStore(options: MongoStoreOptions): Promise<Store> {
  const serverSelectionTimeoutMS = options.serverSelectionTimeoutMS ?? SERVER_SELECTION_TIMEOUT_MS;
  const connection = await mongoose
    .createConnection(options.uri, {
      ...(options.dbName ? { dbName: options.dbName } : {}),
      serverSelectionTimeoutMS,
      // A server that accepts the connection and never answers the handshake fails as fast as one that is down.
      connectTimeoutMS: serverSelectionTimeoutMS,
      // Belt and braces: documents are written in their JSON form already (see plain()).
      ignoreUndefined: true,
    })
    .asPromise();
  if (!connection.db) throw new Error('MongoDB connection has no database');
  return new MongoStore(connection, connection.db, options.onIndexReport ?? warnByDefault, options.pingTimeoutMs ?? PING_TIMEOUT_MS);
}

/**
 * The winning plan of each query `find` runs for this definition and query (for tests and diagnostics): lets a
 * test assert that a list query walks an index rather than sorting in memory.
 */
export async function mongoFindPlan<T extends Doc>(
  store: Store,
  def: CollectionDef<T>,
  where: Where<T>,
  options: FindOptions = {},
): Promise<unknown[]> {
  if (!(store instanceof MongoStore)) throw new Error('not a MongoDB store');
  return store.explainFind(def, where, options);
}
