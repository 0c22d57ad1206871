/**
 * Storage port on SQLite (better-sqlite3, WAL). One table per collection, `(id TEXT PRIMARY KEY, doc TEXT)` with
 * the JSON document; declared indexes are expression indexes on `json_extract(doc,'$.field')` and every query
 * uses the very same expressions so that SQLite picks them. Only validated names are written into SQL; every
 * value is a bound parameter.
 *
 * better-sqlite3 is synchronous but transaction callbacks are async, so one async mutex serialises
 * transactions: while one is open, every other operation on this store waits for it (nobody sees or joins
 * uncommitted state), including one called from inside its own callback that goes around the callback's session
 * (see tx-flow.ts): that one fails after the lock wait limit. When no transaction is open an operation runs
 * synchronously, with no queue at all.
 */
import { createHash } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
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
import { errors } from '../errors';
import { clampLimit, decodeCursor, pageSegments, toPage, type PageSegment } from './cursor';
import { checkpointElsewhere, walClosed, walWritten } from './checkpointer';
import { useWal } from './wal';
import { watchWrites } from './watch-writes';
import { TxFlowCheck, txFlowCheckFromEnv } from './tx-flow';
import {
  DuplicateKeyError,
  type Collection,
  type CollectionDef,
  type FindOptions,
  type Page,
  type Scalar,
  type Store,
  type StoreSession,
  type Where,
} from './types';

type Doc = { id: string };

/**
 * How long an operation or a transaction waits for the store's lock before it fails. Transactions are short (a few
 * milliseconds; BEGIN IMMEDIATE waits at most BEGIN_WAIT_MS for another process): a wait this long is a caller
 * waiting for the transaction it runs in (a store-level operation inside a transaction's callback), which would
 * otherwise hang the store for good.
 */
const LOCK_WAIT_MS = 30_000;

/**
 * How long a transaction's BEGIN IMMEDIATE waits for another process's write lock (replicas on one file) before the
 * transaction fails with 503 SERVICE_UNAVAILABLE, nothing written. SQLite's own busy handler sleeps on the calling
 * thread, so it is given BEGIN_SYNC_WAIT_MS per attempt and the rest of the wait is asynchronous, in growing pauses
 * up to BEGIN_PAUSE_MAX_MS: a process waiting for a replica's lock goes on serving its other work meanwhile (it froze
 * for up to the whole busy_timeout before, and answered the wait's end with a 500).
 */
const BEGIN_WAIT_MS = 5_000;
const BEGIN_SYNC_WAIT_MS = 2;
const BEGIN_PAUSE_MAX_MS = 25;
/** busy_timeout for every other statement (autocommit writes, WAL set-up). */
const BUSY_TIMEOUT_MS = 5_000;

/** The SQL expression for a field: the primary key column for `id`, else the JSON path. Names are validated. */
function expr(field: string): string {
  return field === 'id' ? 'id' : `json_extract(doc,'$.${field}')`;
}

/** json_extract yields 1/0 for JSON true/false, and better-sqlite3 cannot bind booleans. */
function bind(value: Scalar): string | number | null {
  return typeof value === 'boolean' ? (value ? 1 : 0) : value;
}

interface Conditions {
  parts: string[];
  params: Array<string | number | null>;
}

function conditions(where: object | undefined): Conditions {
  const parts: string[] = [];
  const params: Array<string | number | null> = [];
  for (const [field, value] of whereEntries(where)) {
    if (value === null) parts.push(`${expr(field)} IS NULL`);
    else {
      parts.push(`${expr(field)} = ?`);
      params.push(bind(value));
    }
  }
  return { parts, params };
}

const RANGE_SQL = { gt: '>', gte: '>=', lt: '<', lte: '<=' } as const;

/** The `where` conditions of a find plus its range on the sort field (a range excludes the null segments). */
function findConditions(schema: Schema, where: object | undefined, range: FindOptions['range']): Conditions {
  const conds = conditions(where);
  for (const [op, value] of rangeEntries(range)) {
    conds.parts.push(`${expr(schema.sortField)} ${RANGE_SQL[op]} ?`);
    conds.params.push(value);
  }
  return conds;
}

const clause = (parts: string[]) => (parts.length ? ` WHERE ${parts.join(' AND ')}` : '');

/**
 * The SELECT for one segment of a page (see pageSegments), at most `limit` rows. The LIMIT is written into the SQL, not
 * bound: SQLite's planner reads a bound LIMIT's value, so each new binding expires the statement and the next run
 * prepares it again (5-10 µs a query, measured). Limits are few (clamped page sizes), so are the cached statements.
 */
function segmentQuery(schema: Schema, where: Conditions, segment: PageSegment, order: 'asc' | 'desc', limit: number) {
  const sort = expr(schema.sortField);
  const dir = order === 'desc' ? 'DESC' : 'ASC';
  const beyond = order === 'desc' ? '<' : '>';
  const parts = [...where.parts];
  const params = [...where.params];
  let orderBy = `${sort} ${dir}, id ${dir}`;
  if (segment.nulls) {
    parts.push(`${sort} IS NULL`);
    if (segment.after) {
      parts.push(`id ${beyond} ?`);
      params.push(segment.after.id);
    }
    orderBy = `id ${dir}`; // with the sort value fixed at NULL, ordering by id alone lets the index provide it
  } else if (segment.after) {
    // Written as a range plus a filter (not a row-value comparison) so that SQLite seeks the index to the cursor.
    parts.push(`${sort} ${beyond}= ?`, `(${sort} ${beyond} ? OR id ${beyond} ?)`);
    const value = bind(segment.after.sortValue);
    params.push(value, value, segment.after.id);
  } else {
    parts.push(`${sort} IS NOT NULL`);
  }
  if (!Number.isSafeInteger(limit) || limit < 0) throw new Error(`invalid limit ${limit}`);
  return { sql: `SELECT doc FROM "${schema.name}"${clause(parts)} ORDER BY ${orderBy} LIMIT ${limit}`, params };
}

function indexName(table: string, kind: string, columns: string[]): string {
  const hash = createHash('sha256').update(JSON.stringify(columns)).digest('hex').slice(0, 8);
  return `${table}_${kind}_${hash}`;
}

class Table {
  /** Set once the table and its indexes exist (reset if a transaction that created them rolls back). */
  ready = false;
  base: SqliteCollection<Doc> | null = null;
  constructor(readonly schema: Schema) {}

  ddl(uniqueIndexes: Map<string, string[]>): string[] {
    const { name, sortField, indexes, retiredIndexes } = this.schema;
    const statements = [`CREATE TABLE IF NOT EXISTS "${name}" (id TEXT PRIMARY KEY, doc TEXT NOT NULL)`];
    const declared = new Set<string>();
    for (const index of indexes) {
      const { id, fields } = sqliteIndex(name, index, sortField);
      declared.add(id);
      const columns = fields.map(expr).join(', ');
      if (index.unique) {
        uniqueIndexes.set(id, index.fields);
        statements.push(`CREATE UNIQUE INDEX IF NOT EXISTS "${id}" ON "${name}" (${columns})`);
      } else {
        statements.push(`CREATE INDEX IF NOT EXISTS "${id}" ON "${name}" (${columns})`);
      }
    }
    // As on MongoDB: retired definitions go once every declared index exists, and never one still declared.
    for (const index of retiredIndexes) {
      const { id } = sqliteIndex(name, index, index.sortField);
      if (!declared.has(id)) statements.push(`DROP INDEX IF EXISTS "${id}"`);
    }
    return statements;
  }
}

/** A declared index's name and columns: a list index is the where fields, then the sort field and id. */
function sqliteIndex(table: string, index: { fields: string[]; unique: boolean }, sortField: string) {
  if (index.unique) return { id: indexName(table, 'u', index.fields), fields: index.fields };
  // The where fields, then the sort field and id: `find` pages straight from the index.
  const fields = [...new Set([...index.fields, sortField, 'id'])];
  return { id: indexName(table, 'f', fields), fields };
}

interface Tx {
  open: boolean;
  session: StoreSession;
  /** Tables first created inside this transaction: a rollback undoes their DDL too. */
  created: Table[];
  /** Set by a duplicate key inside the transaction: it is doomed, as MongoDB aborts it (see Store.transaction). */
  failure: DuplicateKeyError | null;
}

/** Write hints come at most this often (a burst of commits is one hint). */
const WRITE_HINT_DEBOUNCE_MS = 200;

class SqliteStore implements Store {
  readonly kind = 'sqlite' as const;
  readonly db: Database.Database;
  private readonly statements = new Map<string, Database.Statement>();
  private readonly docStatements = new Map<string, Database.Statement>();
  private readonly tables = new WeakMap<object, Table>();
  /** Unique index name -> its fields, to name the fields in a DuplicateKeyError. */
  private readonly uniqueIndexes = new Map<string, string[]>();
  /** Runs a function in BEGIN IMMEDIATE, or in a savepoint when a transaction is already open. */
  readonly atomic: Database.Transaction<(fn: () => unknown) => unknown>;
  /** Checked mode only (tests): refuses what goes around an open transaction's session. */
  private readonly flow: TxFlowCheck | null;
  private locked = false;
  private readonly waiters: Array<() => void> = [];
  private current: Tx | null = null;

  constructor(
    private readonly path: string,
    private readonly lockWaitMs: number,
    checkTxFlow: boolean,
    private readonly beginWaitMs: number,
  ) {
    this.flow = checkTxFlow ? new TxFlowCheck() : null;
    if (path !== ':memory:' && path !== '') mkdirSync(dirname(path), { recursive: true });
    this.db = new Database(path);
    // busy_timeout first: replicas of the service may hold the write lock while this one opens the file.
    this.db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
    useWal(this.db);
    this.db.pragma('synchronous = NORMAL');
    checkpointElsewhere(this.db, path);
    this.atomic = this.db.transaction((fn: () => unknown) => fn());
  }

  /** A write committed (a transaction, or a statement outside one): its WAL is checkpointed soon, off this thread. */
  wrote(): void {
    walWritten(this.path);
  }

  statement(sql: string): Database.Statement {
    return this.prepared(this.statements, sql, false);
  }

  /**
   * A statement that selects one column (`doc`): its rows come back as the bare values, not as `{doc}` objects
   * (better-sqlite3's pluck), which halves the cost of reading a page of 20 (~8 µs of ~18).
   */
  docsStatement(sql: string): Database.Statement {
    return this.prepared(this.docStatements, sql, true);
  }

  /** Prepared once per SQL text (pluck is a statement's mode, so plucking statements have a cache of their own). */
  private prepared(cache: Map<string, Database.Statement>, sql: string, pluck: boolean): Database.Statement {
    let statement = cache.get(sql);
    if (!statement) {
      // Shapes come from code, so this stays small; the bound only guards against a caller building names.
      if (cache.size >= 2000) cache.clear();
      statement = pluck ? this.db.prepare(sql).pluck() : this.db.prepare(sql);
      cache.set(sql, statement);
    }
    return statement;
  }

  table(def: AnyDef): Table {
    let table = this.tables.get(def);
    if (!table) {
      table = new Table(schemaOf(def));
      this.tables.set(def, table);
    }
    return table;
  }

  /** Creates the table and indexes on first use; runs under the same rules as any operation. */
  ready(table: Table): void {
    if (table.ready) return;
    for (const sql of table.ddl(this.uniqueIndexes)) this.db.exec(sql);
    table.ready = true;
    if (this.current) this.current.created.push(table);
  }

  /**
   * Maps a unique violation to DuplicateKeyError; anything else is rethrown. Inside a transaction the violation
   * dooms it (see Store.transaction): an operation body only runs while a transaction is open if it belongs to it.
   */
  duplicate(err: unknown, collection: string): never {
    // Matched by code, not instanceof: the native addon keeps the SqliteError class of the first module
    // instance that loaded it, so a second instance (jest's per-file registries) would not match.
    const code = (err as { code?: unknown } | null)?.code;
    let mapped: DuplicateKeyError | null = null;
    if (code === 'SQLITE_CONSTRAINT_PRIMARYKEY') mapped = new DuplicateKeyError(collection, ['id']);
    else if (code === 'SQLITE_CONSTRAINT_UNIQUE') {
      const index = /index '([^']+)'/.exec(String((err as { message?: unknown }).message))?.[1];
      mapped = new DuplicateKeyError(collection, (index && this.uniqueIndexes.get(index)) || ['id']);
    }
    if (!mapped) throw err;
    if (this.current?.open) this.current.failure ??= mapped;
    throw mapped;
  }

  /** The duplicate key that doomed the open transaction, if any: its later operations fail with it too. */
  doomedBy(): DuplicateKeyError | null {
    return this.current?.open ? this.current.failure : null;
  }

  private acquire(): Promise<void> | void {
    if (!this.locked) {
      this.locked = true;
      return;
    }
    return new Promise<void>((resolve, reject) => {
      const granted = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        const at = this.waiters.indexOf(granted);
        if (at >= 0) this.waiters.splice(at, 1);
        reject(
          new Error(
            `waited ${this.lockWaitMs} ms for this SQLite store's open transaction: a store-level operation or ` +
              `store.transaction() inside a transaction's callback waits for that very transaction (use the ` +
              `callback's session), or a transaction held the store too long`,
          ),
        );
      }, this.lockWaitMs);
      this.waiters.push(granted);
    });
  }

  /** Hands the lock to the next waiter (it stays locked) or frees it. */
  private release(): void {
    const next = this.waiters.shift();
    if (next) next();
    else this.locked = false;
  }

  /**
   * Runs a non-transactional operation: at once when the store is idle, else after the open transaction (one called
   * from inside that transaction's callback fails: see tx-flow.ts).
   */
  exec<R>(op: () => R): R | Promise<R> {
    if (!this.locked) return op();
    this.flow?.refuse('a store-level operation');
    return this.withLock(op);
  }

  private async withLock<R>(op: () => R): Promise<R> {
    await this.acquire();
    try {
      return op();
    } finally {
      this.release();
    }
  }

  collection<T extends Doc>(def: CollectionDef<T>): Collection<T> {
    const table = this.table(def);
    table.base ??= new SqliteCollection<Doc>(this, table, null);
    return table.base as unknown as Collection<T>;
  }

  /** BEGIN IMMEDIATE, waiting for another process's write lock without holding up this thread (beginWaitMs). */
  private async begin(): Promise<void> {
    const deadline = performance.now() + this.beginWaitMs;
    for (let pause = 1; ; pause = Math.min(2 * pause, BEGIN_PAUSE_MAX_MS)) {
      this.statement(`PRAGMA busy_timeout = ${BEGIN_SYNC_WAIT_MS}`).get();
      try {
        this.statement('BEGIN IMMEDIATE').run();
        return;
      } catch (err) {
        if ((err as { code?: unknown }).code !== 'SQLITE_BUSY') throw err;
      } finally {
        this.statement(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`).get();
      }
      if (performance.now() >= deadline)
        throw errors.unavailable(`The service's store stayed locked by another process for ${this.beginWaitMs} ms; retry`, {
          reason: 'store_busy',
        });
      await new Promise((resolve) => setTimeout(resolve, pause * (1 + Math.random())));
    }
  }

  async transaction<R>(fn: (tx: StoreSession) => Promise<R>): Promise<R> {
    this.flow?.refuse('store.transaction()');
    await this.acquire();
    const tx: Tx = {
      open: true,
      created: [],
      failure: null,
      session: { collection: <T extends Doc>(def: CollectionDef<T>) => this.bound(def, tx) },
    };
    let begun = false;
    try {
      await this.begin();
      begun = true;
      this.current = tx;
      const result = await (this.flow ? this.flow.run(tx, () => fn(tx.session)) : fn(tx.session));
      if (tx.failure) throw tx.failure; // the callback caught it: the transaction still rolls back, as on MongoDB
      this.statement('COMMIT').run();
      this.wrote();
      return result;
    } catch (err) {
      if (begun && this.db.inTransaction) this.statement('ROLLBACK').run();
      for (const table of tx.created) table.ready = false;
      throw err;
    } finally {
      tx.open = false;
      this.current = null;
      this.release();
    }
  }

  private bound<T extends Doc>(def: CollectionDef<T>, tx: Tx): Collection<T> {
    return new SqliteCollection<Doc>(this, this.table(def), tx) as unknown as Collection<T>;
  }

  async ensure<T extends Doc>(def: CollectionDef<T>): Promise<void> {
    const table = this.table(def);
    await this.exec(() => this.ready(table));
  }

  watchWrites(hint: () => void): () => void {
    return watchWrites(this.path, hint, WRITE_HINT_DEBOUNCE_MS);
  }

  async ping(): Promise<void> {
    this.statement('select 1').get();
  }

  async close(): Promise<void> {
    await this.acquire();
    try {
      this.statements.clear();
      this.docStatements.clear();
      this.db.close();
      walClosed(this.path);
    } finally {
      this.release();
    }
  }

  /** The statements `find` would run for a first fetch of each segment (for tests and diagnostics). */
  findStatements(def: AnyDef, where: object, options: FindOptions = {}): Array<{ sql: string; params: unknown[] }> {
    const table = this.table(def);
    this.ready(table);
    const cursor = options.cursor ? decodeCursor(options.cursor) : null;
    const order = options.order === 'asc' ? 'asc' : 'desc';
    const conds = findConditions(table.schema, where, options.range);
    return pageSegments(order, cursor, options.range !== undefined).map((segment) =>
      segmentQuery(table.schema, conds, segment, order, clampLimit(options.limit) + 1),
    );
  }

  /** EXPLAIN QUERY PLAN of the statements `find` would run: the details of each, in segment order. */
  explainFind(def: AnyDef, where: object, options: FindOptions = {}): string[][] {
    return this.findStatements(def, where, options).map(({ sql, params }) => {
      const plan = this.db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...params) as Array<{ detail: string }>;
      return plan.map((row) => row.detail);
    });
  }
}

class SqliteCollection<T extends Doc> implements Collection<T> {
  private readonly name: string;
  constructor(
    private readonly store: SqliteStore,
    private readonly table: Table,
    private readonly tx: Tx | null,
  ) {
    this.name = table.schema.name;
  }

  /** `run` for a write: outside a transaction the statement commits by itself, so the store hears of it. */
  private write<R>(op: () => R): R | Promise<R> {
    if (this.tx) return this.run(op);
    return this.run(() => {
      const result = op();
      this.store.wrote();
      return result;
    });
  }

  /** Every operation body is synchronous; this decides whether it runs now or after the open transaction. */
  private run<R>(op: () => R): R | Promise<R> {
    const body = () => {
      const doomed = this.store.doomedBy();
      if (doomed) throw doomed;
      this.store.ready(this.table);
      return op();
    };
    if (this.tx) {
      if (!this.tx.open) throw new Error('the transaction has already finished');
      return body();
    }
    return this.store.exec(body);
  }

  private one(sql: string, params: unknown[]): T | null {
    const doc = this.store.docsStatement(sql).get(...params) as string | undefined;
    return doc === undefined ? null : (JSON.parse(doc) as T);
  }

  async insert(doc: T): Promise<T> {
    assertId(doc.id);
    assertNoNullInUnique(this.table.schema, Object.entries(doc));
    const json = JSON.stringify(doc);
    return this.write(() => {
      try {
        this.store.statement(`INSERT INTO "${this.name}" (id, doc) VALUES (?, ?)`).run(doc.id, json);
      } catch (err) {
        this.store.duplicate(err, this.name);
      }
      return doc;
    });
  }

  async get(id: string, where?: Where<T>): Promise<T | null> {
    assertId(id, { allowEmpty: true });
    const conds = conditions(where);
    return this.run(() => this.one(`SELECT doc FROM "${this.name}"${clause(['id = ?', ...conds.parts])}`, [id, ...conds.params]));
  }

  async findOne(where: Where<T>): Promise<T | null> {
    const conds = conditions(where);
    return this.run(() => this.one(`SELECT doc FROM "${this.name}"${clause(conds.parts)} LIMIT 1`, conds.params));
  }

  async find(where: Where<T>, options: FindOptions = {}): Promise<Page<T>> {
    const limit = clampLimit(options.limit);
    const order = options.order === 'asc' ? 'asc' : 'desc';
    const cursor = options.cursor ? decodeCursor(options.cursor) : null;
    const conds = findConditions(this.table.schema, where, options.range);
    const { sortField } = this.table.schema;
    return this.run(() => {
      const rows: T[] = [];
      for (const segment of pageSegments(order, cursor, options.range !== undefined)) {
        const { sql, params } = segmentQuery(this.table.schema, conds, segment, order, limit + 1 - rows.length);
        const found = this.store.docsStatement(sql).all(...params) as string[];
        for (const doc of found) rows.push(JSON.parse(doc) as T);
        if (rows.length > limit) break;
      }
      return toPage(rows, limit, (doc) => sortValueOf(doc, sortField));
    });
  }

  async update(id: string, where: Where<T>, patch: Partial<T>): Promise<T | null> {
    assertId(id, { allowEmpty: true });
    const conds = conditions(where);
    const fields = patchEntries(id, patch);
    assertNoNullInUnique(this.table.schema, fields);
    if (fields.length === 0) return this.get(id, where);
    // One statement: the compare (WHERE) and the set (json_set) are atomic. json(?) keeps values typed as JSON.
    const sets = fields.map(([field]) => `'$.${field}', json(?)`).join(', ');
    const sql = `UPDATE "${this.name}" SET doc = json_set(doc, ${sets})${clause(['id = ?', ...conds.parts])} RETURNING doc`;
    const params = [...fields.map(([, value]) => JSON.stringify(value)), id, ...conds.params];
    return this.write(() => {
      try {
        return this.one(sql, params);
      } catch (err) {
        return this.store.duplicate(err, this.name);
      }
    });
  }

  async increment(id: string, where: Where<T>, by: Partial<Record<keyof T & string, number>>): Promise<T | null> {
    assertId(id, { allowEmpty: true });
    const conds = conditions(where);
    const fields = incrementEntries(by);
    const select = `SELECT doc FROM "${this.name}"${clause(['id = ?', ...conds.parts])}`;
    const write = `UPDATE "${this.name}" SET doc = ? WHERE id = ?`;
    // The sum is computed in JS (SQLite would print doubles with 15 digits and integers as 6.0). Read and write run
    // with nothing between them; outside a transaction, one immediate transaction of their own keeps them atomic
    // against other connections too. Inside one (the store's open transaction holds the write lock already) a
    // savepoint would add two statements per increment and no atomicity: a failure dooms the transaction anyway.
    const atomic = this.tx ? (op: () => unknown) => op() : (op: () => unknown) => this.store.atomic.immediate(op);
    return this.write(
      () =>
        atomic(() => {
          const doc = this.one(select, [id, ...conds.params]) as Record<string, unknown> | null;
          if (!doc) return null;
          for (const [field, amount] of fields) {
            const current = doc[field] ?? 0; // missing or null counts from zero, as $ifNull does on MongoDB
            if (typeof current !== 'number') throw new Error(`cannot increment non-numeric field ${field}`);
            doc[field] = current + amount;
          }
          try {
            this.store.statement(write).run(JSON.stringify(doc), id);
          } catch (err) {
            this.store.duplicate(err, this.name); // a counter in a unique index
          }
          return doc;
        }) as T | null,
    );
  }

  async delete(id: string, where?: Where<T>): Promise<boolean> {
    assertId(id, { allowEmpty: true });
    const conds = conditions(where);
    const sql = `DELETE FROM "${this.name}"${clause(['id = ?', ...conds.parts])}`;
    return this.write(() => this.store.statement(sql).run(id, ...conds.params).changes > 0);
  }

  async deleteMany(where: Where<T>): Promise<number> {
    const conds = conditions(where);
    const sql = `DELETE FROM "${this.name}"${clause(conds.parts)}`;
    return this.write(() => this.store.statement(sql).run(...conds.params).changes);
  }

  async count(where: Where<T>): Promise<number> {
    const conds = conditions(where);
    const sql = `SELECT count(*) AS n FROM "${this.name}"${clause(conds.parts)}`;
    return this.run(() => (this.store.statement(sql).get(...conds.params) as { n: number }).n);
  }
}

export function openSqliteStore(options: {
  path: string;
  /** How long an operation waits for the store's open transaction before it fails (default LOCK_WAIT_MS). */
  lockWaitMs?: number;
  /** Refuse store-level calls inside a transaction's callback at once (default: STORE_TX_FLOW_CHECK=1, tests). */
  checkTxFlow?: boolean;
  /** How long a transaction waits for another process's write lock before it fails with 503 (BEGIN_WAIT_MS). */
  beginWaitMs?: number;
}): Store {
  return new SqliteStore(
    options.path,
    options.lockWaitMs ?? LOCK_WAIT_MS,
    options.checkTxFlow ?? txFlowCheckFromEnv(),
    options.beginWaitMs ?? BEGIN_WAIT_MS,
  );
}

/**
 * The query plan of each statement `find` runs for this definition and query (for tests and diagnostics):
 * lets a test assert that a list query is served by an index rather than a table scan.
 */
export function sqliteFindPlan<T extends Doc>(store: Store, def: CollectionDef<T>, where: Where<T>, options?: FindOptions): string[][] {
  if (!(store instanceof SqliteStore)) throw new Error('not a SQLite store');
  return store.explainFind(def, where, options);
}

/** The SQL of the statements `find` would run for this definition and query (for tests and diagnostics). */
export function sqliteFindSql<T extends Doc>(store: Store, def: CollectionDef<T>, where: Where<T>, options?: FindOptions): string[] {
  if (!(store instanceof SqliteStore)) throw new Error('not a SQLite store');
  return store.findStatements(def, where, options).map((s) => s.sql);
}
