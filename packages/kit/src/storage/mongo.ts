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
 *
 * Every wait is bounded by one setting, `opTimeoutMs` (MONGODB_OP_TIMEOUT_MS; see mongoClientOptions): a primary that
 * stops answering fails the calls waiting on it instead of holding handlers, the outbox relay or shutdown. The
 * driver's own `timeoutMS` (CSOT) cannot do it: the driver in use (mongodb 7) ignores it.
 */
import { createHash } from 'node:crypto';
import mongoose from 'mongoose';
import {
  assertId,
  assertNoNullInUnique,
  incrementEntries,
  patchEntries,
  rangeEntries,
  schemaOf,
  sortValueOf,
  whereEntries,
  type AnyDef,
  type Schema,
} from './common';
import { withDeadline } from '../deadline';
import { clampLimit, decodeCursor, pageSegments, toPage } from './cursor';
import { debounced } from './watch-writes';
import { TxFlowCheck, txFlowCheckFromEnv } from './tx-flow';
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

/** Default of MONGODB_OP_TIMEOUT_MS, as GRPC_DEADLINE_MS: an answer later than a caller's deadline helps nobody. */
export const DEFAULT_OP_TIMEOUT_MS = 5000;
/** ping() answers within this, reachable or not, so a health probe never hangs. */
const PING_TIMEOUT_MS = 3000;
/**
 * What the client-side socket timeout adds to the server-side limit (maxTimeMS): a server that is alive answers
 * "time limit exceeded" itself first; only one that does not answer at all meets the socket timeout.
 */
const SOCKET_GRACE_MS = 1000;
/** A change stream's getMore waits at most this for changes (the server's default), below the socket timeout. */
const WATCH_AWAIT_MS = 1000;

/**
 * The driver client's options: each bound derives from `opTimeoutMs`.
 * - serverSelectionTimeoutMS / connectTimeoutMS: waiting for a primary (an election, a server down) or a handshake
 *   (driver default 30 s each).
 * - socketTimeoutMS: a request on a connection whose server stops answering fails (the connection is closed) instead
 *   of waiting forever (driver default: no limit). Every operation also carries maxTimeMS = opTimeoutMs.
 * - waitQueueTimeoutMS: waiting for a pooled connection while all are busy (driver default: no limit).
 * - bufferCommands off: while no primary is known, mongoose would hold startSession (every transaction) for its own
 *   10 s instead of letting the operations fail after server selection.
 * - writeConcern majority, with wtimeoutMS: a write outside a transaction is acknowledged once a majority holds it,
 *   so a failover cannot roll it back (the implicit default is w:1 before MongoDB 5.0 and on some sets with an
 *   arbiter), and waiting for replication is bounded too.
 */
export function mongoClientOptions(opTimeoutMs: number, dbName?: string): mongoose.ConnectOptions {
  return {
    ...(dbName ? { dbName } : {}),
    serverSelectionTimeoutMS: opTimeoutMs,
    connectTimeoutMS: opTimeoutMs,
    socketTimeoutMS: opTimeoutMs + SOCKET_GRACE_MS,
    waitQueueTimeoutMS: opTimeoutMs,
    bufferCommands: false,
    writeConcern: { w: 'majority', wtimeoutMS: opTimeoutMs },
    // Belt and braces: documents are written in their JSON form already (see plain()).
    ignoreUndefined: true,
  };
}

/**
 * Majority on both sides: a transaction reads a snapshot of majority-committed data and is acknowledged only once
 * a majority has it, so a committed write survives a failover and no replica reads state that could roll back.
 * The commit (and its wait for the majority) is bounded by `opTimeoutMs` like any operation.
 */
export function transactionOptions(opTimeoutMs: number): mongoose.mongo.TransactionOptions {
  return {
    readConcern: { level: 'snapshot' },
    writeConcern: { w: 'majority', wtimeoutMS: opTimeoutMs },
    readPreference: 'primary',
    maxCommitTimeMS: opTimeoutMs,
  };
}

/** The part of a driver session runTransaction uses. */
export type TransactionSession = Pick<ClientSession, 'startTransaction' | 'commitTransaction' | 'abortTransaction' | 'inTransaction'>;

const hasLabel = (err: unknown, label: string) => err instanceof mongoose.mongo.MongoError && err.hasErrorLabel(label);
const MAX_TIME_MS_EXPIRED = 50;
const isMaxTimeExpired = (err: unknown) =>
  err instanceof mongoose.mongo.MongoError &&
  (err.code === MAX_TIME_MS_EXPIRED || (err as { writeConcernError?: { code?: unknown } }).writeConcernError?.code === MAX_TIME_MS_EXPIRED);

/**
 * The driver's withTransaction loop (retry the callback on TransientTransactionError, the commit on
 * UnknownTransactionCommitResult), but no new attempt after `budgetMs`: the driver's keeps retrying for 120 s,
 * which an election or a hung primary turns into a handler, a relay or a shutdown held for two minutes. Each attempt
 * is itself bounded (maxTimeMS, socket timeout). Past the budget the last error is thrown; when that is a commit's
 * UnknownTransactionCommitResult, the transaction may still have committed (as with any write whose answer is lost).
 */
export async function runTransaction<R>(
  session: TransactionSession,
  fn: () => Promise<R>,
  options: mongoose.mongo.TransactionOptions,
  budgetMs: number,
  now: () => number = () => performance.now(),
): Promise<R> {
  const deadline = now() + budgetMs;
  for (let attempt = 0; ; attempt++) {
    if (attempt > 0) {
      // The driver's backoff: jitter * min(5 ms * 1.5^attempt, 500 ms).
      const backoffMs = Math.random() * Math.min(5 * 1.5 ** attempt, 500);
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, Math.min(backoffMs, deadline - now()))));
    }
    session.startTransaction(options);
    let result: R;
    try {
      result = await fn();
    } catch (err) {
      if (session.inTransaction()) await session.abortTransaction(); // ignores the server's errors itself
      if (hasLabel(err, 'TransientTransactionError') && now() < deadline) continue;
      throw err;
    }
    for (;;) {
      try {
        await session.commitTransaction();
        return result;
      } catch (err) {
        if (now() >= deadline) throw err;
        // Retrying a commit whose answer was lost is safe: the server commits a transaction once.
        if (hasLabel(err, 'UnknownTransactionCommitResult') && !isMaxTimeExpired(err)) continue;
        if (hasLabel(err, 'TransientTransactionError')) break; // the whole transaction again
        throw err;
      }
    }
  }
}

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
  return plansOf(schema.indexes, schema.sortField);
}

/** The indexes of the collection's retired definitions, as indexPlans named them when they were declared. */
export function retiredIndexPlans(schema: Schema): IndexPlan[] {
  return schema.retiredIndexes.flatMap((index) => plansOf([index], index.sortField));
}

function plansOf(indexes: Schema['indexes'], sortField: string): IndexPlan[] {
  const plans: IndexPlan[] = [];
  for (const index of indexes) {
    if (index.unique) {
      if (index.fields.length === 1 && index.fields[0] === 'id') continue;
      const partialFilterExpression = Object.fromEntries(index.fields.filter((f) => f !== 'id').map((f) => [f, { $exists: true }]));
      const indexKey = Object.fromEntries(index.fields.map((f) => [key(f), 1 as const]));
      plans.push(named('u', index.fields, { key: indexKey, unique: true, partialFilterExpression }));
    } else {
      const fields = [...new Set([...index.fields.map(key), key(sortField), '_id'])];
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

/** Whether an existing index is this plan: by its name, or by definition (one created before names were given). */
function isPlan(existing: mongoose.mongo.IndexDescriptionInfo, plan: IndexPlan): boolean {
  return (
    existing.name === plan.name ||
    (JSON.stringify(existing.key) === JSON.stringify(plan.key) &&
      (existing.unique === true) === plan.unique &&
      JSON.stringify(existing.partialFilterExpression ?? null) === JSON.stringify(plan.partialFilterExpression ?? null))
  );
}

/** What index reconciliation needs of a driver collection. */
export type IndexOps = Pick<mongoose.mongo.Collection<MongoDoc>, 'indexes' | 'createIndex' | 'dropIndex'>;

/** Where index changes are reported (a dropped retired index, an undeclared one); a service passes its logger. */
export type IndexReport = (message: string, details: Record<string, unknown>) => void;

/** Server error codes met while changing indexes. */
const NAMESPACE_NOT_FOUND = 26;
const INDEX_NOT_FOUND = 27;
const INDEX_CONFLICTS = new Set([85 /* IndexOptionsConflict */, 86 /* IndexKeySpecsConflict */]);
const codeOf = (err: unknown) => (err as { code?: unknown } | null)?.code;

/**
 * Brings a collection's indexes to its definition, safely while two versions of a service run at once (a rolling
 * deploy), each replica of either doing this at start-up:
 * 1. Every declared index that is missing is created, before anything is dropped. Indexes are named by their whole
 *    definition (indexPlans), so an old and a new definition of the same fields are two indexes side by side
 *    (MongoDB 5.0+ keeps indexes on one key that differ in unique or partial filter), and a unique constraint is
 *    never absent: the old one holds until the new one is built. A conflict means an older server that cannot keep
 *    both; start-up then fails naming the indexes rather than dropping one that a running version relies on.
 * 2. Only then, an index is dropped when it is one of the collection's retired definitions (retiredIndexes) and not a
 *    declared one. An index this version does not know (a newer version's, one made by hand) is never dropped:
 *    it is reported as undeclared.
 * No maxTimeMS on createIndex: the server would abort a long build at that limit. A build that outlasts the
 * client's socket timeout goes on on the server, and a later start-up finds it (or joins it).
 */
export async function reconcileIndexes(collection: IndexOps, schema: Schema, report: IndexReport, opTimeoutMs: number): Promise<void> {
  const plans = indexPlans(schema);
  const retired = retiredIndexPlans(schema);
  const options = { maxTimeMS: opTimeoutMs };
  const list = async (): Promise<mongoose.mongo.IndexDescriptionInfo[]> => {
    try {
      return await collection.indexes(options);
    } catch (err) {
      if (codeOf(err) === NAMESPACE_NOT_FOUND) return []; // the collection does not exist yet
      throw err;
    }
  };
  let existing = await list();
  for (const plan of plans) {
    for (let attempt = 1; !existing.some((index) => isPlan(index, plan)); attempt++) {
      try {
        const { name, unique, partialFilterExpression } = plan;
        await collection.createIndex(plan.key, { name, ...(unique ? { unique, partialFilterExpression } : {}) });
        break;
      } catch (err) {
        if (!INDEX_CONFLICTS.has(codeOf(err) as number)) throw err;
        existing = await list(); // a replica creating the same index at the same moment: look again
        if (attempt < 3) continue;
        const clashing = existing.filter((index) => JSON.stringify(index.key) === JSON.stringify(plan.key)).map((index) => index.name);
        throw new Error(
          `cannot create index ${plan.name} on ${schema.name} beside ${clashing.join(', ')}: this server keeps one index per key ` +
            `(MongoDB before 5.0); drop the other by hand once no running version needs it`,
          { cause: err },
        );
      }
    }
  }
  existing = await list();
  const declared = (index: mongoose.mongo.IndexDescriptionInfo) => index.name === '_id_' || plans.some((plan) => isPlan(index, plan));
  for (const index of existing) {
    if (!index.name || declared(index) || !retired.some((plan) => isPlan(index, plan))) continue;
    await collection.dropIndex(index.name, options).catch((err: unknown) => {
      if (codeOf(err) !== NAMESPACE_NOT_FOUND && codeOf(err) !== INDEX_NOT_FOUND) throw err; // another replica dropped it first
    });
    report('dropped a retired index', { collection: schema.name, dropped: index.name });
  }
  const undeclared = existing.filter((index) => !declared(index) && !retired.some((plan) => isPlan(index, plan)));
  if (undeclared.length > 0) {
    report('indexes that no definition declares or retires (kept: a running version may use them)', {
      collection: schema.name,
      indexes: undeclared.map((index) => index.name),
    });
  }
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
  const range = rangeEntries(options.range).map(([op, value]): Filter => ({ [sortKey]: { [`$${op}`]: value } }));
  return pageSegments(order, cursor, options.range !== undefined).map((segment) => {
    const extra: Filter[] = [...range];
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

/** What every operation passes the driver: its transaction's session, if any, and the server-side time limit. */
interface OpOptions {
  session: ClientSession | undefined;
  maxTimeMS: number;
}

interface Tx {
  open: boolean;
  session: ClientSession;
  bound: StoreSession;
  /** Set by a duplicate key inside the transaction: the server has aborted it (see Store.transaction). */
  failure: DuplicateKeyError | null;
}

const warnByDefault: IndexReport = (message, details) => process.emitWarning(`${message} ${JSON.stringify(details)}`);

/** Write hints come at most this often (a burst of changes is one hint). */
const WRITE_HINT_DEBOUNCE_MS = 200;
/** Pause before a failed change stream is opened again. */
const WATCH_RETRY_MS = 5000;

class MongoStore implements Store {
  readonly kind = 'mongodb' as const;
  private readonly tables = new WeakMap<object, Table>();
  /** Checked mode only (tests): refuses what goes around an open transaction's session (see tx-flow.ts). */
  private readonly flow = txFlowCheckFromEnv() ? new TxFlowCheck() : null;

  constructor(
    private readonly connection: mongoose.Connection,
    private readonly db: mongoose.mongo.Db,
    private readonly report: IndexReport,
    private readonly pingTimeoutMs: number,
    readonly opTimeoutMs: number,
  ) {
    this.transactionOptions = transactionOptions(opTimeoutMs);
  }

  private readonly transactionOptions: mongoose.mongo.TransactionOptions;

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

  private createIndexes({ schema, collection }: Table): Promise<void> {
    return reconcileIndexes(collection, schema, this.report, this.opTimeoutMs);
  }

  /**
   * The transaction an operation runs in: its own when made through a transaction's collections, else none (a
   * store-level operation inside a transaction's callback does not join it: see tx-flow.ts).
   */
  txOf(tx: Tx | null): Tx | null {
    if (tx) {
      if (!tx.open) throw new Error('the transaction has already finished');
      return tx;
    }
    this.flow?.refuse('a store-level operation');
    return null;
  }

  collection<T extends Doc>(def: CollectionDef<T>): Collection<T> {
    const table = this.table(def);
    table.base ??= new MongoCollection<Doc>(this, table, null);
    return table.base as unknown as Collection<T>;
  }

  /**
   * Runs `fn` in runTransaction, which retries the whole callback on transient errors (write conflicts,
   * elections) for up to opTimeoutMs: keep side effects other than store writes out of it. A transaction started
   * inside another one's callback does not join it (pass the session instead: see tx-flow.ts). A duplicate key aborts it (the server already has): the
   * DuplicateKeyError is not a driver error, so runTransaction aborts and rethrows it rather than retrying.
   */
  async transaction<R>(fn: (tx: StoreSession) => Promise<R>): Promise<R> {
    this.flow?.refuse('store.transaction()');
    const session = await this.connection.startSession();
    try {
      const attempt = async () => {
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
          const result = await (this.flow ? this.flow.run(tx, () => fn(tx.bound)) : fn(tx.bound));
          if (tx.failure) throw tx.failure; // caught by the callback: the transaction is aborted all the same
          return result;
        } finally {
          tx.open = false;
        }
      };
      return await runTransaction(session, attempt, this.transactionOptions, this.opTimeoutMs);
    } finally {
      await session.endSession();
    }
  }

  async ensure<T extends Doc>(def: CollectionDef<T>): Promise<void> {
    await this.ready(this.table(def));
  }

  /** Answers within pingTimeoutMs: server selection alone could wait opTimeoutMs. */
  async ping(): Promise<void> {
    await withDeadline(this.db.command({ ping: 1 }), this.pingTimeoutMs, `MongoDB did not answer a ping within ${this.pingTimeoutMs} ms`);
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
        const opened = this.db.watch([{ $project: { operationType: 1 } }], {
          maxAwaitTimeMS: Math.min(WATCH_AWAIT_MS, this.opTimeoutMs),
        });
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

  /**
   * Bounded like everything else: closing ends sessions and cursors on the server, and a server that does not answer
   * must not hold shutdown. Past the bound the connections are left to the process's exit.
   */
  async close(): Promise<void> {
    await withDeadline(this.connection.close(), 2 * this.opTimeoutMs + SOCKET_GRACE_MS, 'MongoDB did not close in time').catch(
      (err: unknown) => process.emitWarning(String(err)),
    );
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
   * Runs one operation: waits for the indexes on first use, runs in the transaction it belongs to (if any) with the
   * server-side time limit, and maps a duplicate key. Inside a transaction a duplicate key dooms it, and its later
   * operations fail the same.
   */
  private async run<R>(op: (options: OpOptions, inTransaction: boolean) => Promise<R>): Promise<R> {
    const tx = this.store.txOf(this.tx);
    if (tx?.failure) throw tx.failure;
    const indexing = this.store.ready(this.table);
    if (indexing) await indexing;
    try {
      return await op({ session: tx?.session, maxTimeMS: this.store.opTimeoutMs }, tx !== null);
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
    await this.run((options) => this.collection.insertOne({ ...rest, _id: id }, options));
    return doc;
  }

  async get(id: string, where?: Where<T>): Promise<T | null> {
    assertId(id, { allowEmpty: true });
    const filter = byId(id, where);
    return this.run(async (options) => fromMongo<T>(await this.collection.findOne(filter, options)));
  }

  async findOne(where: Where<T>): Promise<T | null> {
    const filter = filterOf(where);
    return this.run(async (options) => fromMongo<T>(await this.collection.findOne(filter, options)));
  }

  async find(where: Where<T>, options: FindOptions = {}): Promise<Page<T>> {
    const limit = clampLimit(options.limit);
    const queries = findQueries(this.table.schema, where, options);
    const { sortField } = this.table.schema;
    return this.run(async (op, inTransaction) => {
      // Not inside a transaction: the server refuses a read concern there (its snapshot is majority-committed).
      const readConcern = options.durable && !inTransaction ? { readConcern: { level: 'majority' as const } } : {};
      const rows: T[] = [];
      for (const { filter, sort } of queries) {
        const found = await this.collection.find(filter, { ...op, ...readConcern, sort, limit: limit + 1 - rows.length }).toArray();
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
    return this.run(async (options) =>
      fromMongo<T>(await this.collection.findOneAndUpdate(filter, { $set: set }, { ...options, returnDocument: 'after' })),
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
    return this.run(async (options) =>
      fromMongo<T>(await this.collection.findOneAndUpdate(filter, pipeline, { ...options, returnDocument: 'after' })),
    );
  }

  async delete(id: string, where?: Where<T>): Promise<boolean> {
    assertId(id, { allowEmpty: true });
    const filter = byId(id, where);
    return this.run(async (options) => (await this.collection.deleteOne(filter, options)).deletedCount > 0);
  }

  async deleteMany(where: Where<T>): Promise<number> {
    const filter = filterOf(where);
    return this.run(async (options) => (await this.collection.deleteMany(filter, options)).deletedCount);
  }

  async count(where: Where<T>): Promise<number> {
    const filter = filterOf(where);
    return this.run((options) => this.collection.countDocuments(filter, options));
  }
}

export interface MongoStoreOptions {
  uri: string;
  /** Else the database named in the URI. */
  dbName?: string;
  /**
   * MONGODB_OP_TIMEOUT_MS, default 5000: the bound of every wait (see mongoClientOptions). The driver's own defaults
   * would hold start-up for 30 s and an operation on a primary that stopped answering forever.
   */
  opTimeoutMs?: number;
  /** Default 3000. */
  pingTimeoutMs?: number;
  /** Dropped retired indexes and undeclared ones; default: a process warning. */
  onIndexReport?: IndexReport;
}

export async function openMongoStore(options: MongoStoreOptions): Promise<Store> {
  const opTimeoutMs = options.opTimeoutMs ?? DEFAULT_OP_TIMEOUT_MS;
  const connection = await mongoose.createConnection(options.uri, mongoClientOptions(opTimeoutMs, options.dbName)).asPromise();
  if (!connection.db) throw new Error('MongoDB connection has no database');
  const pingTimeoutMs = options.pingTimeoutMs ?? Math.min(PING_TIMEOUT_MS, opTimeoutMs);
  return new MongoStore(connection, connection.db, options.onIndexReport ?? warnByDefault, pingTimeoutMs, opTimeoutMs);
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
