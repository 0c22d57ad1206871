/**
 * Storage port on MongoDB through mongoose's connection (the driver underneath; no mongoose models). One
 * database per service; a document is stored with `_id` = its id and read back with `id`.
 *
 * `where` values come from user input: only scalars are accepted (an object could be an operator such as
 * `{ $gt: '' }`), ids must be strings, and field names are validated identifiers, so no key is ever built
 * from user input.
 *
 * Transactions need a replica set (a single-node one is enough: `mongod --replSet rs0` + `rs.initiate()`); on a
 * standalone server `transaction()` fails with "Transaction numbers are only allowed on a replica set member".
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import mongoose from 'mongoose';
import { assertId, incrementEntries, patchEntries, schemaOf, sortValueOf, whereEntries, type AnyDef, type Schema } from './common';
import { clampLimit, decodeCursor, pageSegments, toPage } from './cursor';
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

/** The MongoDB key for a (validated) field name. */
const key = (field: string) => (field === 'id' ? '_id' : field);

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

/** Maps a duplicate key error (11000) to DuplicateKeyError, naming the index's fields; rethrows the rest. */
function duplicate(err: unknown, collection: string): never {
  const error = err as { code?: unknown; keyPattern?: Record<string, unknown> } | null;
  if (error && error.code === 11000) {
    const fields = error.keyPattern ? Object.keys(error.keyPattern).map((k) => (k === '_id' ? 'id' : k)) : ['id'];
    throw new DuplicateKeyError(collection, fields);
  }
  throw err;
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
}

class MongoStore implements Store {
  readonly kind = 'mongodb' as const;
  private readonly tables = new WeakMap<object, Table>();
  private readonly context = new AsyncLocalStorage<Tx>();

  constructor(
    private readonly connection: mongoose.Connection,
    private readonly db: mongoose.mongo.Db,
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

  private async createIndexes({ schema, collection }: Table): Promise<void> {
    for (const index of schema.indexes) {
      if (index.unique) {
        if (index.fields.length === 1 && index.fields[0] === 'id') continue; // _id is unique already
        // Partial on presence, so that documents missing the field do not collide (as NULLs do not in SQLite).
        const partialFilterExpression = Object.fromEntries(index.fields.filter((f) => f !== 'id').map((f) => [f, { $exists: true }]));
        const spec = Object.fromEntries(index.fields.map((f) => [key(f), 1 as const]));
        await collection.createIndex(spec, { unique: true, partialFilterExpression });
      } else {
        // The where fields, then the sort field and _id, so that `find` pages straight from the index.
        const spec = new Map<string, 1 | -1>(index.fields.map((f) => [key(f), 1]));
        if (!spec.has(key(schema.sortField))) spec.set(key(schema.sortField), -1);
        if (!spec.has('_id')) spec.set('_id', -1);
        await collection.createIndex(Object.fromEntries(spec));
      }
    }
  }

  /**
   * The session an operation runs in: its transaction's when made through a transaction's collections, or the
   * open transaction of the async flow it was called from (as in SQLite, an operation inside a transaction
   * callback joins it), else none.
   */
  session(tx: Tx | null): ClientSession | undefined {
    if (tx) {
      if (!tx.open) throw new Error('the transaction has already finished');
      return tx.session;
    }
    const open = this.context.getStore();
    return open?.open ? open.session : undefined;
  }

  collection<T extends Doc>(def: CollectionDef<T>): Collection<T> {
    const table = this.table(def);
    table.base ??= new MongoCollection<Doc>(this, table, null);
    return table.base as unknown as Collection<T>;
  }

  /**
   * Runs `fn` in `session.withTransaction`, which retries the whole callback on transient errors (write
   * conflicts, elections): keep side effects other than store writes out of it. A transaction started inside
   * another one's callback joins it.
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
          bound: {
            collection: <T extends Doc>(def: CollectionDef<T>) =>
              new MongoCollection<Doc>(this, this.table(def), tx) as unknown as Collection<T>,
          },
        };
        try {
          return await this.context.run(tx, () => fn(tx.bound));
        } finally {
          tx.open = false;
        }
      });
    } finally {
      await session.endSession();
    }
  }

  async ensure<T extends Doc>(def: CollectionDef<T>): Promise<void> {
    await this.ready(this.table(def));
  }

  async ping(): Promise<void> {
    await this.db.command({ ping: 1 });
  }

  async close(): Promise<void> {
    await this.connection.close();
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

  /** Waits for the indexes on first use and returns the session to run in. */
  private async prepare(): Promise<ClientSession | undefined> {
    const session = this.store.session(this.tx);
    const indexing = this.store.ready(this.table);
    if (indexing) await indexing;
    return session;
  }

  async insert(doc: T): Promise<T> {
    assertId(doc.id);
    const { id, ...rest } = doc;
    const session = await this.prepare();
    try {
      await this.collection.insertOne({ ...rest, _id: id }, { session });
    } catch (err) {
      duplicate(err, this.name);
    }
    return doc;
  }

  async get(id: string, where?: Where<T>): Promise<T | null> {
    assertId(id, { allowEmpty: true });
    const filter = byId(id, where);
    const session = await this.prepare();
    return fromMongo<T>(await this.collection.findOne(filter, { session }));
  }

  async findOne(where: Where<T>): Promise<T | null> {
    const filter = filterOf(where);
    const session = await this.prepare();
    return fromMongo<T>(await this.collection.findOne(filter, { session }));
  }

  async find(where: Where<T>, options: FindOptions = {}): Promise<Page<T>> {
    const limit = clampLimit(options.limit);
    const order = options.order === 'asc' ? 'asc' : 'desc';
    const cursor = options.cursor ? decodeCursor(options.cursor) : null;
    const base = filterOf(where);
    const { sortField } = this.table.schema;
    const sort = key(sortField);
    const dir = order === 'desc' ? -1 : 1;
    const beyond = order === 'desc' ? '$lt' : '$gt';
    const session = await this.prepare();
    const rows: T[] = [];
    for (const segment of pageSegments(order, cursor)) {
      const extra: Filter[] = [];
      if (segment.nulls) {
        extra.push({ [sort]: null }); // null matches missing too
        if (segment.after) extra.push({ _id: { [beyond]: segment.after.id } });
      } else if (segment.after) {
        // A range on the sort field (index bounds) plus a tie-break filter on _id.
        const value = segment.after.sortValue;
        extra.push(
          { [sort]: { [`${beyond}e`]: value } },
          { $or: [{ [sort]: { [beyond]: value } }, { _id: { [beyond]: segment.after.id } }] },
        );
      } else {
        extra.push({ [sort]: { $ne: null } });
      }
      const found = await this.collection
        .find({ ...base, $and: extra }, { sort: { [sort]: dir, _id: dir }, limit: limit + 1 - rows.length, session })
        .toArray();
      for (const doc of found) rows.push(fromMongo<T>(doc) as T);
      if (rows.length > limit) break;
    }
    return toPage(rows, limit, (doc) => sortValueOf(doc, sortField));
  }

  async update(id: string, where: Where<T>, patch: Partial<T>): Promise<T | null> {
    assertId(id, { allowEmpty: true });
    const fields = patchEntries(id, patch);
    if (fields.length === 0) return this.get(id, where);
    const filter = byId(id, where);
    const session = await this.prepare();
    try {
      const doc = await this.collection.findOneAndUpdate(
        filter,
        { $set: Object.fromEntries(fields) },
        { returnDocument: 'after', session },
      );
      return fromMongo<T>(doc);
    } catch (err) {
      return duplicate(err, this.name);
    }
  }

  async increment(id: string, where: Where<T>, by: Partial<Record<keyof T & string, number>>): Promise<T | null> {
    assertId(id, { allowEmpty: true });
    const fields = incrementEntries(by);
    if (fields.length === 0) return this.get(id, where);
    const filter = byId(id, where);
    const session = await this.prepare();
    const doc = await this.collection.findOneAndUpdate(
      filter,
      // The driver's types cannot express numeric fields of an open document shape; names are validated.
      { $inc: Object.fromEntries(fields) } as mongoose.mongo.UpdateFilter<MongoDoc>,
      { returnDocument: 'after', session },
    );
    return fromMongo<T>(doc);
  }

  async delete(id: string, where?: Where<T>): Promise<boolean> {
    assertId(id, { allowEmpty: true });
    const filter = byId(id, where);
    const session = await this.prepare();
    return (await this.collection.deleteOne(filter, { session })).deletedCount > 0;
  }

  async deleteMany(where: Where<T>): Promise<number> {
    const filter = filterOf(where);
    const session = await this.prepare();
    return (await this.collection.deleteMany(filter, { session })).deletedCount;
  }

  async count(where: Where<T>): Promise<number> {
    const filter = filterOf(where);
    const session = await this.prepare();
    return this.collection.countDocuments(filter, { session });
  }
}

export async function openMongoStore(options: { uri: string; dbName?: string }): Promise<Store> {
  const dbOptions = options.dbName ? { dbName: options.dbName } : {}; // else the database named in the URI
  const connection = await mongoose.createConnection(options.uri, dbOptions).asPromise();
  if (!connection.db) throw new Error('MongoDB connection has no database');
  return new MongoStore(connection, connection.db);
}
