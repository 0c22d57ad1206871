import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import mongoose from 'mongoose';
import { startFakeMongod, type FakeMongod } from '../../../../test/helpers/fake-mongod';
import { openEmbeddedBus } from '../events/embedded';
import { OutboxRelay } from '../events/outbox';
import { feedCollection, readFeed } from '../feed';
import { schemaOf } from './common';
import { indexPlans, mongoFindPlan, openMongoStore, reconcileIndexes, retiredIndexPlans, type IndexOps, type IndexPlan } from './mongo';
import { capsContract } from '../caps.contract';
import { storeContract } from './store.contract';
import type { CollectionDef, Store } from './types';

// A test reads its peer's address directly: there is no service config here.

const uri = process.env.MONGODB_URI;
const dbNames: string[] = [];
const freshDbName = () => {
  const name = `kit_contract_${randomUUID().replace(/-/g, '')}`;
  dbNames.push(name);
  return name;
};

interface Row {
  id: string;
  tenantId: string;
  status?: string;
  email?: string;
  seq?: number;
  createdAt?: string;
}

// The shapes the services declare (see each service's collections.ts and the outbox): where fields, the sort field
// among them, a numeric sort field, the sort-only index.
const shapes: Array<{ def: CollectionDef<Row>; where: Partial<Row> }> = [
  { def: { name: 'by_tenant', indexes: [{ fields: ['tenantId'] }] }, where: { tenantId: 't1' } },
  { def: { name: 'sort_in_fields', indexes: [{ fields: ['tenantId', 'createdAt'] }] }, where: { tenantId: 't1' } },
  { def: { name: 'two_fields', indexes: [{ fields: ['tenantId', 'status'] }] }, where: { tenantId: 't1', status: 'queued' } },
  { def: { name: 'by_seq', sortField: 'seq', indexes: [{ fields: ['seq'] }] }, where: {} },
  { def: { name: 'sort_only', sortField: 'seq', indexes: [{ fields: [] }] }, where: {} },
];

describe('mongo index plans (no server needed)', () => {
  const plansOf = (def: CollectionDef<Row>): IndexPlan[] => indexPlans(schemaOf(def));

  test('a list index ends in the sort field and _id, all in one direction, so both orders walk it', () => {
    for (const { def } of shapes) {
      for (const plan of plansOf(def)) {
        const keys = Object.keys(plan.key);
        expect(keys.slice(-2)).toEqual([def.sortField ?? 'createdAt', '_id']);
        expect(new Set(Object.values(plan.key))).toEqual(new Set([1]));
      }
    }
    expect(plansOf(shapes[1].def)[0].key).toEqual({ tenantId: 1, createdAt: 1, _id: 1 });
    expect(plansOf(shapes[3].def)[0].key).toEqual({ seq: 1, _id: 1 });
    expect(plansOf({ name: 'ids', sortField: 'id', indexes: [{ fields: [] }] })).toEqual([]); // _id serves it
  });

  test('a unique index is partial on its fields existing; names follow the definition', () => {
    const def: CollectionDef<Row> = { name: 'users', indexes: [{ fields: ['tenantId', 'email'], unique: true }] };
    const [plan] = plansOf(def);
    expect(plan).toMatchObject({
      key: { tenantId: 1, email: 1 },
      unique: true,
      partialFilterExpression: { tenantId: { $exists: true }, email: { $exists: true } },
    });
    expect(plan.name).toMatch(/^u_tenantId_email_[0-9a-f]{8}$/);
    // Same definition, same name (replicas agree); another definition of the same fields, another name.
    expect(plansOf({ ...def }).map((p) => p.name)).toEqual([plan.name]);
    expect(plansOf({ name: 'users', indexes: [{ fields: ['tenantId', 'email'] }] })[0].name).not.toBe(plan.name);
  });
});

type IndexInfo = mongoose.mongo.IndexDescriptionInfo;

/**
 * A collection's index catalogue under MongoDB 5.0+'s rules: names are unique, and two indexes may share a key when
 * they differ in unique or partial filter (the index signature). Records each change, and after each one whether a
 * unique index covers `watchUnique`.
 */
function catalogue(initial: IndexInfo[], watchUnique: string[] = []) {
  const indexes: IndexInfo[] = [{ v: 2, key: { _id: 1 }, name: '_id_' }, ...initial];
  const changes: string[] = [];
  const uniqueHeld: boolean[] = [];
  const signature = (index: IndexInfo) => JSON.stringify([index.key, index.unique === true, index.partialFilterExpression ?? null]);
  const note = (change: string) => {
    changes.push(change);
    uniqueHeld.push(indexes.some((index) => index.unique && JSON.stringify(Object.keys(index.key)) === JSON.stringify(watchUnique)));
  };
  const fail = (code: number) => Object.assign(new Error(`code ${code}`), { code });
  const ops = {
    indexes: async () => indexes.map((index) => ({ ...index })),
    createIndex: async (
      key: Record<string, 1>,
      options: { name: string; unique?: boolean; partialFilterExpression?: Record<string, unknown> },
    ) => {
      const index: IndexInfo = { v: 2, key, ...options };
      const named = indexes.find((other) => other.name === index.name);
      if (named) {
        if (signature(named) === signature(index)) return index.name;
        throw fail(86);
      }
      if (indexes.some((other) => signature(other) === signature(index))) throw fail(85);
      indexes.push(index);
      note(`create ${index.name}`);
      return index.name;
    },
    dropIndex: async (name: string) => {
      const at = indexes.findIndex((index) => index.name === name);
      if (at < 0) throw fail(27);
      indexes.splice(at, 1);
      note(`drop ${name}`);
      return { ok: 1 };
    },
  };
  return { ops: ops as unknown as IndexOps, indexes, changes, uniqueHeld, names: () => indexes.map((index) => index.name) };
}

describe('mongo index changes across versions (no server needed)', () => {
  const reports: Array<{ message: string; details: Record<string, unknown> }> = [];
  const report = (message: string, details: Record<string, unknown>) => reports.push({ message, details });
  const reconcile = (ops: IndexOps, def: CollectionDef<Row>) => reconcileIndexes(ops, schemaOf(def), report, 1000);
  beforeEach(() => reports.splice(0));

  test('an index of another definition on the same key is kept while the new one is created: the unique constraint never lapses', async () => {
    // Left by an older version (or by hand): unique on email, not partial, under the driver's default name.
    const db = catalogue([{ v: 2, key: { email: 1 }, name: 'email_1', unique: true }], ['email']);
    const def: CollectionDef<Row> = { name: 'users', indexes: [{ fields: ['email'], unique: true }] };
    await reconcile(db.ops, def);
    const [plan] = indexPlans(schemaOf(def));
    expect(db.names()).toEqual(['_id_', 'email_1', plan.name]);
    expect(db.changes).toEqual([`create ${plan.name}`]);
    expect(db.uniqueHeld.every(Boolean)).toBe(true);
    expect(reports).toContainEqual(expect.objectContaining({ details: { collection: 'users', indexes: ['email_1'] } }));
  });

  test("during a rolling deploy neither version drops the other one's index, whichever starts last", async () => {
    // v1 lists by email (sorted by id); v2 makes (email, id) unique: one key, two definitions.
    const v1: CollectionDef<Row> = { name: 'rows', sortField: 'id', indexes: [{ fields: ['email'] }] };
    const v2: CollectionDef<Row> = { name: 'rows', sortField: 'id', indexes: [{ fields: ['email', 'id'], unique: true }] };
    const [p1] = indexPlans(schemaOf(v1));
    const [p2] = indexPlans(schemaOf(v2));
    expect(p1.key).toEqual(p2.key);
    const db = catalogue([]);
    for (const def of [v1, v2, v1, v2, v1]) await reconcile(db.ops, def);
    expect(db.changes).toEqual([`create ${p1.name}`, `create ${p2.name}`]);
    expect(db.names()).toEqual(['_id_', p1.name, p2.name]);
  });

  test('a retired definition is dropped only after every declared index exists, and nothing unknown is dropped', async () => {
    const v1: CollectionDef<Row> = { name: 'users', indexes: [{ fields: ['email'], unique: true }] };
    const v3: CollectionDef<Row> = {
      name: 'users',
      indexes: [{ fields: ['tenantId', 'email'], unique: true }],
      retiredIndexes: [{ fields: ['email'], unique: true }],
    };
    const db = catalogue([{ v: 2, key: { status: 1 }, name: 'by_hand' }], ['tenantId', 'email']);
    await reconcile(db.ops, v1);
    const [old] = indexPlans(schemaOf(v1));
    const [current] = indexPlans(schemaOf(v3));
    expect(retiredIndexPlans(schemaOf(v3))).toEqual([old]);
    await reconcile(db.ops, v3);
    expect(db.changes).toEqual([`create ${old.name}`, `create ${current.name}`, `drop ${old.name}`]);
    expect(db.names()).toEqual(['_id_', 'by_hand', current.name]);
    expect(reports).toContainEqual({ message: 'dropped a retired index', details: { collection: 'users', dropped: old.name } });
    // A definition both declared and retired (a mistake) is kept.
    await reconcile(db.ops, { ...v3, retiredIndexes: [{ fields: ['tenantId', 'email'], unique: true }] });
    expect(db.names()).toContain(current.name);
  });

  test('an older server that keeps one index per key fails start-up naming both, and drops nothing', async () => {
    const db = catalogue([{ v: 2, key: { email: 1 }, name: 'email_1', unique: true }]);
    const create = db.ops.createIndex.bind(db.ops);
    // MongoDB 4.4: another index on the same key is a conflict whatever its options.
    (db.ops as { createIndex: unknown }).createIndex = async (key: Record<string, 1>, options: { name: string }) => {
      if (db.indexes.some((index) => JSON.stringify(index.key) === JSON.stringify(key) && index.name !== options.name)) {
        throw Object.assign(new Error('Index already exists with a different name'), { code: 85 });
      }
      return create(key, options);
    };
    await expect(reconcile(db.ops, { name: 'users', indexes: [{ fields: ['email'], unique: true }] })).rejects.toThrow(/beside email_1/);
    expect(db.changes).toEqual([]);
  });
});

describe('mongo against a primary that stops answering (a fake wire peer)', () => {
  let peer: FakeMongod;
  let store: Store | undefined;
  const dir = mkdtempSync(join(tmpdir(), 'mongo-fake-'));
  const def: CollectionDef<Row> = { name: 'rows', indexes: [{ fields: ['tenantId'] }] };
  const OP_TIMEOUT_MS = 400;
  // The driver checks the server every 10 s by default; a URI option makes it notice the fake peer's state sooner.
  const fastUri = () => `${peer.uri}&heartbeatFrequencyMS=500`;
  beforeEach(async () => {
    peer = await startFakeMongod();
    store = undefined;
  });
  afterEach(async () => {
    peer.hang = false;
    await store?.close();
    await peer.close();
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const commandsNamed = (name: string) => peer.commands.filter((c) => c.name === name);
  const elapsed = async (work: Promise<unknown>) => {
    const started = Date.now();
    await work.catch(() => undefined);
    return Date.now() - started;
  };

  test('every operation carries the time limit, and writes ask for a majority within it', async () => {
    store = await openMongoStore({ uri: fastUri(), opTimeoutMs: OP_TIMEOUT_MS });
    const rows = store.collection(def);
    await rows.insert({ id: 'a', tenantId: 't' });
    await rows.get('a');
    await rows.find({ tenantId: 't' });
    await rows.update('a', {}, { status: 'x' });
    await rows.increment('a', {}, { seq: 1 });
    await rows.count({ tenantId: 't' });
    await rows.delete('a');
    for (const name of ['insert', 'find', 'findAndModify', 'aggregate', 'delete']) {
      expect(commandsNamed(name).length).toBeGreaterThan(0);
      for (const command of commandsNamed(name))
        expect({ name, maxTimeMS: command.body.maxTimeMS }).toEqual({ name, maxTimeMS: OP_TIMEOUT_MS });
    }
    expect(commandsNamed('insert')[0].body.writeConcern).toEqual({ w: 'majority', wtimeout: OP_TIMEOUT_MS });
  });

  test('an operation, a transaction and close each end within their bound while the primary does not answer', async () => {
    store = await openMongoStore({ uri: fastUri(), opTimeoutMs: OP_TIMEOUT_MS });
    const rows = store.collection(def);
    await store.ensure(def);
    peer.hang = true;
    // maxTimeMS cannot help (the server does not answer); the socket timeout (bound + 1 s) ends the wait. Margin
    // for a loaded machine: an unbounded wait is what fails.
    await expect(rows.insert({ id: 'b', tenantId: 't' })).rejects.toThrow();
    expect(await elapsed(rows.get('b'))).toBeLessThan(8000);
    expect(await elapsed(store.transaction(async (tx) => tx.collection(def).insert({ id: 'c', tenantId: 't' })))).toBeLessThan(15_000);
    expect(await elapsed(store.close())).toBeLessThan(15_000);
  }, 60_000);

  test('with the server gone, a transaction fails after server selection (mongoose does not hold it for 10 s)', async () => {
    store = await openMongoStore({ uri: fastUri(), opTimeoutMs: OP_TIMEOUT_MS });
    await store.ensure(def);
    await peer.down();
    // Once the driver's monitor marks the server unknown (seconds), mongoose calls the connection disconnected.
    const connection = mongoose.connections[mongoose.connections.length - 1];
    for (let i = 0; i < 300 && connection.readyState !== mongoose.ConnectionStates.disconnected; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(connection.readyState).toBe(mongoose.ConnectionStates.disconnected);
    expect(await elapsed(store.transaction(async (tx) => tx.collection(def).insert({ id: 'f', tenantId: 't' })))).toBeLessThan(6000);
  }, 30_000);

  test("a transaction that keeps meeting write conflicts gives up after its budget (not the driver's 120 s)", async () => {
    store = await openMongoStore({ uri: fastUri(), opTimeoutMs: OP_TIMEOUT_MS });
    await store.ensure(def);
    peer.answer.set('insert', () => ({
      ok: 0,
      code: 112,
      codeName: 'WriteConflict',
      errmsg: 'write conflict',
      errorLabels: ['TransientTransactionError'],
    }));
    const attempt = store.transaction(async (tx) => tx.collection(def).insert({ id: 'd', tenantId: 't' }));
    await expect(attempt).rejects.toThrow('write conflict');
    expect(commandsNamed('insert').length).toBeGreaterThan(1); // retried, as the driver does, within the budget
  }, 20_000);

  test("a commit whose outcome stays unknown is retried within the budget, then reported (not for the driver's 120 s)", async () => {
    store = await openMongoStore({ uri: fastUri(), opTimeoutMs: OP_TIMEOUT_MS });
    await store.ensure(def);
    peer.answer.set('commitTransaction', () => ({
      ok: 0,
      code: 189,
      codeName: 'PrimarySteppedDown',
      errmsg: 'stepped down',
      errorLabels: ['UnknownTransactionCommitResult'],
    }));
    const started = Date.now();
    await expect(store.transaction(async (tx) => tx.collection(def).insert({ id: 'e', tenantId: 't' }))).rejects.toThrow('stepped down');
    expect(Date.now() - started).toBeLessThan(10_000);
    const commits = commandsNamed('commitTransaction');
    expect(commits[0].body).toMatchObject({ maxTimeMS: OP_TIMEOUT_MS, writeConcern: { w: 'majority', wtimeout: OP_TIMEOUT_MS } });
  }, 20_000);

  test('the outbox relay reads pending events with majority read concern', async () => {
    store = await openMongoStore({ uri: fastUri(), opTimeoutMs: OP_TIMEOUT_MS });
    const bus = openEmbeddedBus({ path: join(dir, `bus-${randomUUID()}.db`) });
    try {
      await new OutboxRelay(store, bus).flush();
    } finally {
      await bus.close();
    }
    const reads = commandsNamed('find').filter((c) => c.body.find === 'outbox');
    expect(reads.length).toBeGreaterThan(0);
    for (const read of reads) expect(read.body.readConcern).toEqual({ level: 'majority' });
    // Reads that stay inside the store keep the default (a majority read may lag the primary).
    expect(commandsNamed('find').find((c) => c.body.find === 'outbox_lease')?.body.readConcern).toBeUndefined();
  });

  test('a range on the sort field reaches the server as bounds on it, with the nulls segment left out', async () => {
    store = await openMongoStore({ uri: fastUri(), opTimeoutMs: OP_TIMEOUT_MS });
    const after = '2024-01-02T00:00:00.000Z';
    const before = '2024-01-05T00:00:00.000Z';
    await store.collection(def).find({ tenantId: 't' }, { limit: 5, range: { gt: after, lte: before } });
    const reads = commandsNamed('find').filter((c) => c.body.find === 'rows');
    // One query only: a document without a sort value is never in a range, so its segment is not read.
    expect(reads).toHaveLength(1);
    expect(reads[0].body.filter).toEqual({
      tenantId: 't',
      $and: [{ createdAt: { $gt: after } }, { createdAt: { $lte: before } }, { createdAt: { $ne: null } }],
    });
    expect(reads[0].body.sort).toEqual({ createdAt: -1, _id: -1 });
  });

  test('a change feed is read with majority read concern', async () => {
    store = await openMongoStore({ uri: fastUri(), opTimeoutMs: OP_TIMEOUT_MS });
    await readFeed(store, feedCollection('revocations'), 0);
    const reads = commandsNamed('find').filter((c) => c.body.find === 'revocations');
    expect(reads.length).toBeGreaterThan(0);
    for (const read of reads) expect(read.body.readConcern).toEqual({ level: 'majority' });
  });
});

describe('mongo start-up', () => {
  let server: Server;
  const sockets = new Set<Socket>();
  beforeAll(async () => {
    // Accepts connections and never answers: the handshake would wait for the driver's 30 s connect timeout.
    server = createServer((socket) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  });
  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });

  test('against a server that never answers, opening fails within the selection timeout instead of hanging', async () => {
    const { port } = server.address() as { port: number };
    // With a bound of 500 ms: the default's 5 s would only make the wait longer.
    const started = Date.now();
    await expect(openMongoStore({ uri: `mongodb://127.0.0.1:${port}/kit?directConnection=true`, opTimeoutMs: 500 })).rejects.toThrow();
    expect(Date.now() - started).toBeLessThan(5000);
  }, 15_000);
});

// MongoDB cannot run on every machine (it is not installable on the CI/dev box), so these run only when
// MONGODB_URI points at a server. Transactions need a replica set: a single-node one (`--replSet rs0`) will do.
const d = uri ? describe : describe.skip;

d('mongo store', () => {
  afterAll(async () => {
    if (!uri || dbNames.length === 0) return;
    const connection = await mongoose.createConnection(uri).asPromise();
    try {
      for (const name of dbNames) await connection.useDb(name).dropDatabase();
    } finally {
      await connection.close();
    }
  });

  storeContract('mongodb', async () => openMongoStore({ uri: uri!, dbName: freshDbName() }));
  capsContract('mongodb', async () => {
    const dbName = freshDbName();
    return [await openMongoStore({ uri: uri!, dbName }), await openMongoStore({ uri: uri!, dbName })];
  });

  describe('indexes', () => {
    let store: Store;
    const reports: Array<{ message: string; details: Record<string, unknown> }> = [];
    const dbName = freshDbName();
    beforeAll(async () => {
      store = await openMongoStore({ uri: uri!, dbName, onIndexReport: (message, details) => reports.push({ message, details }) });
    });
    afterAll(async () => store?.close());

    test('every list query the services run walks an index: no in-memory sort, no collection scan', async () => {
      for (const { def, where } of shapes) {
        const rows = store.collection(def);
        for (let i = 0; i < 30; i++) {
          await rows.insert({
            id: `r${i}`,
            tenantId: `t${i % 2}`,
            status: i % 3 ? 'queued' : 'done',
            seq: i,
            createdAt: `2024-01-${10 + (i % 9)}`,
          });
        }
        const { nextCursor } = await rows.find(where, { limit: 2 });
        expect(nextCursor).not.toBeNull();
        for (const options of [{}, { order: 'asc' as const }, { cursor: nextCursor }, { cursor: nextCursor, order: 'asc' as const }]) {
          for (const plan of await mongoFindPlan(store, def, where, options)) {
            const text = JSON.stringify(plan);
            expect(text).toContain('IXSCAN');
            expect(text).not.toMatch(/"stage":"(SORT|COLLSCAN)"/);
          }
        }
      }
    });

    test('a changed definition gets its index beside the old one, which goes once a later release retires it', async () => {
      const name = `changed_${randomUUID().slice(0, 8)}`;
      // What an older version left: the same key, other options (not partial), under the driver's default name.
      const connection = await mongoose.createConnection(uri!, { dbName }).asPromise();
      const indexNames = async () => (await connection.db!.collection(name).indexes()).map((index) => index.name).sort();
      try {
        await connection.db!.collection(name).createIndex({ email: 1 }, { unique: true });
        const def: CollectionDef<Row> = { name, indexes: [{ fields: ['email'], unique: true }] };
        await store.ensure(def);
        const [plan] = indexPlans(schemaOf(def));
        // Both kept (MongoDB 5.0+): a running older version still relies on email_1; it is reported, not dropped.
        expect(await indexNames()).toEqual(['_id_', 'email_1', plan.name].sort());
        expect(reports.some((r) => r.details.collection === name && (r.details.indexes as string[]).includes('email_1'))).toBe(true);
        // The next release retires the new index's definition in favour of another: created first, then dropped.
        const next: CollectionDef<Row> = {
          name,
          indexes: [{ fields: ['tenantId', 'email'], unique: true }],
          retiredIndexes: [{ fields: ['email'], unique: true }],
        };
        const again = await openMongoStore({ uri: uri!, dbName, onIndexReport: (message, details) => reports.push({ message, details }) });
        await again.ensure(next);
        await again.close();
        expect(await indexNames()).toEqual(['_id_', 'email_1', indexPlans(schemaOf(next))[0].name].sort());
      } finally {
        await connection.close();
      }
    });

    test('ping answers promptly', async () => {
      await expect(store.ping()).resolves.toBeUndefined();
    });
  });
});
