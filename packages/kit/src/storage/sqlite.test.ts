import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { openSqliteStore, sqliteFindPlan, sqliteFindSql } from './sqlite';
import { storeContract } from './store.contract';
import type { CollectionDef } from './types';

const dir = mkdtempSync(join(tmpdir(), 'kit-sqlite-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let files = 0;
const freshPath = () => join(dir, `store-${++files}.db`);

storeContract('sqlite', async () => openSqliteStore({ path: freshPath() }));

interface Note {
  id: string;
  tenantId: string;
  text: string;
  createdAt: string;
}
const notes: CollectionDef<Note> = { name: 'notes', indexes: [{ fields: ['tenantId'] }] };

describe('sqlite store', () => {
  test('creates parent directories, and data survives close and reopen', async () => {
    const path = join(dir, 'nested', 'deeper', 'durable.db');
    const first = openSqliteStore({ path });
    const doc = { id: 'n1', tenantId: 't1', text: 'kept', createdAt: '2024-01-01T00:00:00.000Z' };
    await first.collection(notes).insert(doc);
    await first.transaction(async (tx) => {
      await tx.collection(notes).insert({ ...doc, id: 'n2' });
    });
    await first.close();

    const second = openSqliteStore({ path });
    expect(await second.collection(notes).get('n1')).toEqual(doc);
    expect(await second.collection(notes).count({ tenantId: 't1' })).toBe(2);
    const raw = new Database(path, { readonly: true });
    expect(raw.pragma('journal_mode', { simple: true })).toBe('wal');
    raw.close();
    await second.close();
  });

  test('works in memory', async () => {
    const store = openSqliteStore({ path: ':memory:' });
    await store.collection(notes).insert({ id: 'm', tenantId: 't', text: 'x', createdAt: 'now' });
    expect(await store.collection(notes).count({})).toBe(1);
    await store.close();
  });

  test('a tenant-filtered find is served by an index, never a scan or a sort', async () => {
    const store = openSqliteStore({ path: freshPath() });
    const items = store.collection(notes);
    for (let i = 0; i < 50; i++) {
      await items.insert({ id: `n${i}`, tenantId: `t${i % 3}`, text: 'x', createdAt: `2024-01-${10 + (i % 9)}` });
    }
    const { nextCursor } = await items.find({ tenantId: 't1' }, { limit: 2 });
    const cases = [{}, { order: 'asc' as const }, { cursor: nextCursor }, { cursor: nextCursor, order: 'asc' as const }];
    for (const options of cases) {
      for (const plan of sqliteFindPlan(store, notes, { tenantId: 't1' }, options)) {
        const text = plan.join('\n');
        expect(text).toMatch(/USING (COVERING )?INDEX notes_f_/);
        expect(text).not.toMatch(/SCAN notes|TEMP B-TREE/);
      }
    }
    // A range on the sort field is a seek on the same index (a window of time, a sweep of old entries).
    for (const options of [{ range: { gt: '2024-01-12', lt: '2024-01-15' } }, { range: { lt: '2024-01-12' }, order: 'asc' as const }]) {
      const [plan] = sqliteFindPlan(store, notes, { tenantId: 't1' }, options);
      expect(plan.join('\n')).toMatch(/USING (COVERING )?INDEX notes_f_\w+ \(<expr>=\? AND <expr>[<>]\?/);
      expect(plan.join('\n')).not.toMatch(/SCAN notes|TEMP B-TREE/);
    }
    // The keyset condition seeks the index to the cursor rather than filtering from the first row.
    expect(sqliteFindPlan(store, notes, { tenantId: 't1' }, { cursor: nextCursor })[0].join()).toMatch(/<expr>=\? AND <expr><\?/);
    await store.close();
  });

  test("a find's LIMIT is part of its SQL, not a bound parameter", async () => {
    // SQLite's planner reads a bound LIMIT's value: binding one expires the statement, so each run would prepare it
    // again. Written in, a page size is one cached statement.
    const store = openSqliteStore({ path: freshPath() });
    const { nextCursor } = await (async () => {
      for (let i = 0; i < 5; i++) await store.collection(notes).insert({ id: `l${i}`, tenantId: 't', text: 'x', createdAt: `${i}` });
      return store.collection(notes).find({ tenantId: 't' }, { limit: 2 });
    })();
    for (const options of [{ limit: 20 }, { limit: 2, cursor: nextCursor }, { limit: 7, range: { gt: '1' } }]) {
      const statements = sqliteFindSql(store, notes, { tenantId: 't' }, options);
      expect(statements.length).toBeGreaterThan(0);
      for (const sql of statements) expect(sql).toMatch(new RegExp(`LIMIT ${options.limit + 1}$`));
    }
    // The pages themselves are the store contract's business; one walk here with the cursor for good measure.
    const second = await store.collection(notes).find({ tenantId: 't' }, { limit: 2, cursor: nextCursor });
    expect(second.items.map((n) => n.id)).toEqual(['l2', 'l1']);
    await store.close();
  });

  test('when no transaction is open an operation runs synchronously', async () => {
    const path = freshPath();
    const store = openSqliteStore({ path });
    await store.ensure(notes);
    const pending = store.collection(notes).insert({ id: 'sync', tenantId: 't', text: 'x', createdAt: 'now' });
    // Before the promise is awaited, another connection already sees the committed row.
    const raw = new Database(path, { readonly: true });
    expect(raw.prepare('SELECT count(*) AS n FROM notes').get()).toEqual({ n: 1 });
    raw.close();
    await pending;
    await store.close();
  });

  test('operations queued behind a transaction run in order once it ends', async () => {
    const store = openSqliteStore({ path: freshPath() });
    const items = store.collection(notes);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const tx = store.transaction(async (t) => {
      await t.collection(notes).insert({ id: 'a', tenantId: 't', text: 'tx', createdAt: '1' });
      await gate;
    });
    const order: string[] = [];
    const queued = [
      items.insert({ id: 'b', tenantId: 't', text: 'after', createdAt: '2' }).then(() => order.push('insert')),
      items.count({}).then((n) => order.push(`count ${n}`)),
    ];
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(order).toEqual([]);
    release();
    await tx;
    await Promise.all(queued);
    expect(order).toEqual(['insert', 'count 2']);
    await store.close();
  });

  test('without the check, a store-level call inside a transaction callback fails after the lock wait limit instead of hanging', async () => {
    // Production mode: no AsyncLocalStorage follows the callback, so a plain operation or a nested transaction from
    // inside it waits for the store's lock, which that very transaction holds. It fails loudly, the transaction rolls
    // back and the store goes on.
    const store = openSqliteStore({ path: freshPath(), lockWaitMs: 200, checkTxFlow: false });
    const items = store.collection(notes);
    await items.insert({ id: 'first', tenantId: 't', text: 'x', createdAt: '1' });
    for (const inside of [
      () => items.insert({ id: 'plain', tenantId: 't', text: 'x', createdAt: '2' }),
      () =>
        store.transaction(async (nested) => nested.collection(notes).insert({ id: 'nested', tenantId: 't', text: 'x', createdAt: '3' })),
    ]) {
      const started = Date.now();
      const failed = store.transaction(async (t) => {
        await t.collection(notes).insert({ id: 'outer', tenantId: 't', text: 'x', createdAt: '4' });
        await inside();
      });
      await expect(failed).rejects.toThrow(/waited 200 ms for this SQLite store's open transaction/);
      expect(Date.now() - started).toBeGreaterThanOrEqual(190);
      expect((await items.find({})).items.map((n) => n.id)).toEqual(['first']);
    }
    // A wait shorter than the limit is served: operations queued behind a transaction run once it commits.
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const tx = store.transaction(async (t) => {
      await t.collection(notes).insert({ id: 'slow', tenantId: 't', text: 'x', createdAt: '5' });
      await gate;
    });
    const queued = items.count({});
    setTimeout(release, 100);
    await tx;
    expect(await queued).toBe(2);
    await store.close();
  });

  describe("another connection's write lock (replicas on one file)", () => {
    const note = (id: string) => ({ id, tenantId: 't1', text: id, createdAt: '2024-01-01T00:00:00.000Z' });
    /** Store `a` holds an open transaction (the file's write lock) until the returned function is called. */
    async function holding(path: string) {
      const a = openSqliteStore({ path });
      await a.collection(notes).insert(note('seed'));
      let release!: () => void;
      const held = new Promise<void>((resolve) => (release = resolve));
      const done = a.transaction(async (tx) => {
        await tx.collection(notes).insert(note('by-a'));
        await held;
      });
      await new Promise((resolve) => setImmediate(resolve)); // its BEGIN has run
      return { a, release, done };
    }

    test('a transaction waits for it without holding up the thread, then commits', async () => {
      const path = freshPath();
      const { a, release, done } = await holding(path);
      const b = openSqliteStore({ path });
      let ticks = 0;
      const clock = setInterval(() => ticks++, 5);
      // The holder lets go from a timer: a wait that held the thread would never see it fire.
      setTimeout(release, 100);
      await b.transaction(async (tx) => void (await tx.collection(notes).insert(note('by-b'))));
      clearInterval(clock);
      await done;
      expect(ticks).toBeGreaterThan(5);
      expect((await b.collection(notes).find({ tenantId: 't1' })).items.map((n) => n.id).sort()).toEqual(['by-a', 'by-b', 'seed']);
      await a.close();
      await b.close();
    });

    test('past beginWaitMs it fails with 503 SERVICE_UNAVAILABLE, having written nothing', async () => {
      const path = freshPath();
      const { a, release, done } = await holding(path);
      const b = openSqliteStore({ path, beginWaitMs: 150 });
      await expect(b.transaction(async (tx) => void (await tx.collection(notes).insert(note('by-b'))))).rejects.toMatchObject({
        code: 'SERVICE_UNAVAILABLE',
        details: { reason: 'store_busy' },
      });
      release();
      await done;
      expect(await b.collection(notes).get('by-b')).toBeNull();
      // The refused store goes on: its next transaction commits.
      await b.transaction(async (tx) => void (await tx.collection(notes).insert(note('after'))));
      expect(await b.collection(notes).get('after')).not.toBeNull();
      await a.close();
      await b.close();
    });
  });
});
