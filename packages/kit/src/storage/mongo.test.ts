import { randomUUID } from 'node:crypto';
import { createServer, type Server, type Socket } from 'node:net';
import mongoose from 'mongoose';
import { schemaOf } from './common';
import { indexPlans, mongoFindPlan, openMongoStore, type IndexPlan } from './mongo';
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
    await expect(openMongoStore({ uri: `mongodb://127.0.0.1:${port}/kit?directConnection=true` })).rejects.toThrow();
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

    test('an index whose definition changed is replaced at start-up, not a crash, and the change is reported', async () => {
      const name = `changed_${randomUUID().slice(0, 8)}`;
      // What an older version left: the same key, other options (not partial), under the driver's default name.
      const connection = await mongoose.createConnection(uri!, { dbName }).asPromise();
      try {
        await connection.db!.collection(name).createIndex({ email: 1 }, { unique: true });
      } finally {
        await connection.close();
      }
      const def: CollectionDef<Row> = { name, indexes: [{ fields: ['email'], unique: true }] };
      await store.ensure(def);
      expect(reports.some((r) => r.details.collection === name && r.details.dropped === 'email_1')).toBe(true);
      // The new index is the partial one: two documents without an email no longer collide.
      await store.collection(def).insert({ id: 'a', tenantId: 't' });
      await store.collection(def).insert({ id: 'b', tenantId: 't' });
      expect(await store.collection(def).count({})).toBe(2);
      // A second process of the same version finds it in place.
      const again = await openMongoStore({ uri: uri!, dbName, onIndexReport: (message, details) => reports.push({ message, details }) });
      const before = reports.length;
      await again.ensure(def);
      await again.close();
      expect(reports.slice(before).filter((r) => r.details.dropped)).toEqual([]);
    });

    test('ping answers promptly', async () => {
      await expect(store.ping()).resolves.toBeUndefined();
    });
  });
});
