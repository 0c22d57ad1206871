/**
 * The storage port's contract: every adapter must pass this suite (sqlite.test.ts always, mongo.test.ts when
 * MONGODB_URI is set). Each test uses its own collection, so one store serves the whole suite.
 */
import { randomUUID } from 'node:crypto';
import { encodeCursor } from './cursor';
import { TxFlowError } from './tx-flow';
import { DuplicateKeyError, InvalidCursorError, type CollectionDef, type FindOptions, type Page, type Store, type Where } from './types';

interface Item {
  id: string;
  tenantId: string;
  name: string;
  email?: string | null;
  tag?: string | null;
  active?: boolean;
  n?: number;
  note?: string;
  meta?: { a: number; b?: string[] };
  createdAt?: string | null;
}

let seq = 0;
function itemsDef(overrides: Partial<CollectionDef<Item>> = {}): CollectionDef<Item> {
  return {
    name: `items_${++seq}`,
    indexes: [
      { fields: ['tenantId'] },
      { fields: ['tenantId', 'tag'] },
      { fields: ['tenantId', 'email'], unique: true },
      { fields: ['name'] },
    ],
    ...overrides,
  };
}

function item(fields: Partial<Item> = {}): Item {
  return { id: randomUUID(), tenantId: 't1', name: 'thing', createdAt: new Date().toISOString(), ...fields };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Deterministic shuffle so that insertion order differs from sort order. */
function shuffled<T>(values: T[]): T[] {
  const out = [...values];
  let state = 42;
  for (let i = out.length - 1; i > 0; i--) {
    state = (state * 1103515245 + 12345) % 2147483648;
    const j = state % (i + 1);
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

export function storeContract(name: string, open: () => Promise<Store>): void {
  describe(`storage contract: ${name}`, () => {
    let store: Store;
    beforeAll(async () => {
      store = await open();
    });
    afterAll(async () => {
      await store?.close();
    });

    test('kind, ping and ensure', async () => {
      expect(['sqlite', 'mongodb']).toContain(store.kind);
      await expect(store.ping()).resolves.toBeUndefined();
      const def = itemsDef();
      await store.ensure(def);
      await store.ensure(def); // idempotent
      const doc = item();
      await store.collection(def).insert(doc);
      expect(await store.collection(def).get(doc.id)).toEqual(doc);
    });

    test('watchWrites hints after a commit, once for a burst, and no more once stopped', async () => {
      const items = store.collection(itemsDef());
      let hints = 0;
      const stop = store.watchWrites(() => hints++);
      // A change stream needs a moment to open on the server.
      await sleep(store.kind === 'mongodb' ? 500 : 50);
      for (let i = 0; i < 5; i++) await items.insert(item());
      for (let i = 0; i < 150 && hints === 0; i++) await sleep(20);
      expect(hints).toBeGreaterThanOrEqual(1);
      await sleep(400);
      const afterBurst = hints;
      expect(afterBurst).toBeLessThanOrEqual(2); // five commits within a few ms: debounced
      stop();
      await items.insert(item());
      await sleep(400);
      expect(hints).toBe(afterBurst);
    });

    test('insert and get round-trip the document', async () => {
      const items = store.collection(itemsDef());
      const doc = item({ email: 'a@example.com', active: true, n: 3, meta: { a: 1, b: ['x', 'y'] }, tag: null });
      expect(await items.insert(doc)).toEqual(doc);
      expect(await items.get(doc.id)).toEqual(doc);
      expect(await items.get('missing')).toBeNull();
      expect(await items.get('')).toBeNull();
    });

    test('get with a tenant filter does not return another tenant’s document', async () => {
      const items = store.collection(itemsDef());
      const doc = await items.insert(item({ tenantId: 't1' }));
      expect(await items.get(doc.id, { tenantId: 't2' })).toBeNull();
      expect(await items.get(doc.id, { tenantId: 't1' })).toEqual(doc);
      expect(await items.get(doc.id, { id: doc.id, tenantId: 't1' })).toEqual(doc);
      expect(await items.get(doc.id, { id: 'other' })).toBeNull();
    });

    test('a duplicate id throws DuplicateKeyError and keeps the first document', async () => {
      const items = store.collection(itemsDef());
      const doc = await items.insert(item({ name: 'first' }));
      const err = await items.insert({ ...doc, name: 'second' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(DuplicateKeyError);
      expect((err as DuplicateKeyError).fields).toEqual(['id']);
      expect((await items.get(doc.id))?.name).toBe('first');
    });

    test('a unique index throws DuplicateKeyError naming its fields; missing values do not collide', async () => {
      const def = itemsDef();
      const items = store.collection(def);
      await items.insert(item({ tenantId: 't1', email: 'a@example.com' }));
      await items.insert(item({ tenantId: 't2', email: 'a@example.com' })); // other tenant: fine
      await items.insert(item({ tenantId: 't1' })); // no email
      await items.insert(item({ tenantId: 't1' })); // no email either
      const err = await items.insert(item({ tenantId: 't1', email: 'a@example.com' })).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(DuplicateKeyError);
      expect((err as DuplicateKeyError).fields).toEqual(['tenantId', 'email']);
      expect((err as DuplicateKeyError).collection).toBe(def.name);
      expect(await items.count({ tenantId: 't1' })).toBe(3);

      // An update that would break the index fails the same way and changes nothing.
      const other = await items.insert(item({ tenantId: 't1', email: 'b@example.com' }));
      await expect(items.update(other.id, {}, { email: 'a@example.com' })).rejects.toBeInstanceOf(DuplicateKeyError);
      expect((await items.get(other.id))?.email).toBe('b@example.com');
    });

    test('a changed unique definition holds both constraints until the old one is retired, then only the new', async () => {
      const v1 = itemsDef({ indexes: [{ fields: ['tenantId', 'email'], unique: true }] });
      // The next release: (tenantId, name) unique instead. Both versions run at once during the deploy.
      const v2: CollectionDef<Item> = { name: v1.name, indexes: [{ fields: ['tenantId', 'name'], unique: true }] };
      const v3: CollectionDef<Item> = { ...v2, retiredIndexes: [{ fields: ['tenantId', 'email'], unique: true }] };
      await store.ensure(v1);
      await store.collection(v1).insert(item({ email: 'a@example.com', name: 'one' }));
      await store.ensure(v2);
      // v2 dropped nothing: v1's constraint holds beside v2's.
      await expect(store.collection(v2).insert(item({ email: 'a@example.com', name: 'two' }))).rejects.toBeInstanceOf(DuplicateKeyError);
      await expect(store.collection(v2).insert(item({ email: 'b@example.com', name: 'one' }))).rejects.toBeInstanceOf(DuplicateKeyError);
      // v3 retires v1's definition: the email no longer has to be unique, the name still does.
      await store.ensure(v3);
      await store.collection(v3).insert(item({ email: 'a@example.com', name: 'three' }));
      await expect(store.collection(v3).insert(item({ email: 'c@example.com', name: 'one' }))).rejects.toBeInstanceOf(DuplicateKeyError);
      expect(await store.collection(v3).count({ tenantId: 't1' })).toBe(2);
    });

    test('durable reads return what a plain read returns, inside a transaction too', async () => {
      const def = itemsDef();
      const items = store.collection(def);
      const docs = [item({ createdAt: '2024-01-01' }), item({ createdAt: '2024-01-02' }), item({ createdAt: null })];
      for (const doc of docs) await items.insert(doc);
      for (const order of ['asc', 'desc'] as const) {
        const plain = await items.find({ tenantId: 't1' }, { order, limit: 2 });
        const durable = await items.find({ tenantId: 't1' }, { order, limit: 2, durable: true });
        expect(durable).toEqual(plain);
        expect((await items.find({ tenantId: 't1' }, { order, cursor: durable.nextCursor, durable: true })).items).toHaveLength(1);
      }
      await store.transaction(async (tx) => {
        expect((await tx.collection(def).find({ tenantId: 't1' }, { durable: true })).items).toHaveLength(3);
      });
    });

    test('a field set to undefined is not stored: it reads back absent and matches null', async () => {
      const items = store.collection(itemsDef());
      const doc = await items.insert(item({ tag: undefined, note: undefined, meta: { a: 1, b: undefined } }));
      const stored = (await items.get(doc.id)) as unknown as Record<string, unknown>;
      expect(Object.keys(stored)).not.toContain('tag');
      expect(Object.keys(stored)).not.toContain('note');
      expect(stored.meta).toStrictEqual({ a: 1 });
      expect((await items.find({ tenantId: 't1', tag: null })).items.map((d) => d.id)).toEqual([doc.id]);
      // A nested undefined in a patch is left out the same way; a top-level one leaves the field as it was.
      const updated = (await items.update(doc.id, {}, { meta: { a: 2, b: undefined }, note: undefined })) as unknown as Record<
        string,
        unknown
      >;
      expect(updated.meta).toStrictEqual({ a: 2 });
      expect(Object.keys(updated)).not.toContain('note');
      expect(Object.keys((await items.get(doc.id)) as object)).toEqual(Object.keys(updated));
    });

    test('undefined unique fields never collide; an explicit null in a unique field is refused', async () => {
      const items = store.collection(itemsDef());
      await items.insert(item({ email: undefined }));
      await items.insert(item({ email: undefined })); // both lack the field: no collision
      await expect(items.insert(item({ email: null }))).rejects.toThrow(/unique/);
      const other = await items.insert(item({ email: 'x@example.com' }));
      await expect(items.update(other.id, {}, { email: null })).rejects.toThrow(/unique/);
      expect((await items.get(other.id))?.email).toBe('x@example.com');
      expect(await items.count({ tenantId: 't1' })).toBe(3);
      // A null in a field outside every unique index is stored as usual.
      const tagged = await items.insert(item({ tag: null }));
      expect(await items.get(tagged.id)).toEqual(tagged);
    });

    test('increment counts a missing, undefined or null field from zero and refuses a non-number', async () => {
      const items = store.collection(itemsDef());
      const undef = await items.insert(item({ n: undefined }));
      expect((await items.increment(undef.id, {}, { n: 2 }))?.n).toBe(2);
      const nulled = await items.insert(item({ n: null as unknown as number }));
      expect((await items.increment(nulled.id, {}, { n: 5 }))?.n).toBe(5);
      expect((await items.get(nulled.id))?.n).toBe(5);
      const named = await items.insert(item({ name: 'text' }));
      await expect(items.increment(named.id, {}, { name: 1 } as never)).rejects.toThrow();
      expect((await items.get(named.id))?.name).toBe('text');
    });

    test('findOne matches on several fields', async () => {
      const items = store.collection(itemsDef());
      const a = await items.insert(item({ tenantId: 't1', email: 'a@example.com', name: 'a' }));
      await items.insert(item({ tenantId: 't2', email: 'a@example.com', name: 'b' }));
      expect(await items.findOne({ tenantId: 't1', email: 'a@example.com' })).toEqual(a);
      expect(await items.findOne({ tenantId: 't3', email: 'a@example.com' })).toBeNull();
      expect(await items.findOne({ name: 'nobody' })).toBeNull();
    });

    test('null matches a missing or null field, and nothing else', async () => {
      const items = store.collection(itemsDef());
      const missing = await items.insert(item({ name: 'missing' }));
      const isNull = await items.insert(item({ name: 'null', tag: null }));
      const set = await items.insert(item({ name: 'set', tag: 'x' }));
      const empty = await items.insert(item({ name: 'empty', tag: '' }));
      const page = await items.find({ tenantId: 't1', tag: null });
      expect(page.items.map((d) => d.id).sort()).toEqual([missing.id, isNull.id].sort());
      expect(await items.count({ tag: null })).toBe(2);
      expect((await items.findOne({ tag: 'x' }))?.id).toBe(set.id);
      expect((await items.findOne({ tag: '' }))?.id).toBe(empty.id);
      expect(await items.get(set.id, { tag: null })).toBeNull();
    });

    test('booleans match booleans', async () => {
      const items = store.collection(itemsDef());
      const yes = await items.insert(item({ name: 'yes', active: true }));
      const no = await items.insert(item({ name: 'no', active: false }));
      const unset = await items.insert(item({ name: 'unset' }));
      expect((await items.find({ active: true })).items.map((d) => d.id)).toEqual([yes.id]);
      expect((await items.find({ active: false })).items.map((d) => d.id)).toEqual([no.id]);
      expect((await items.find({ active: null })).items.map((d) => d.id)).toEqual([unset.id]);
      expect(await items.get(yes.id, { active: false })).toBeNull();
      expect((await items.update(no.id, { active: false }, { active: true }))?.active).toBe(true);
      expect(await items.count({ active: true })).toBe(2);
    });

    describe('find', () => {
      const def = itemsDef();
      // 30 items of tenant t1 over 6 distinct timestamps (ties), 2 without a timestamp, and noise in t2.
      const t1: Item[] = [];
      for (let i = 0; i < 32; i++) {
        const createdAt = i < 30 ? `2024-01-0${(i % 6) + 1}T00:00:00.000Z` : undefined;
        t1.push({ id: `id-${String(i).padStart(3, '0')}`, tenantId: 't1', name: `n${i}`, tag: i % 2 ? 'odd' : 'even', createdAt });
      }
      const t2 = Array.from({ length: 5 }, (_, i) => item({ id: `other-${i}`, tenantId: 't2' }));
      // Newest first, ties by id descending, missing timestamps last.
      const desc = [...t1]
        .sort((a, b) => {
          if ((a.createdAt ?? null) === null || (b.createdAt ?? null) === null) {
            if (a.createdAt && !b.createdAt) return -1;
            if (!a.createdAt && b.createdAt) return 1;
          } else if (a.createdAt !== b.createdAt) return a.createdAt! < b.createdAt! ? 1 : -1;
          return a.id < b.id ? 1 : -1;
        })
        .map((d) => d.id);

      beforeAll(async () => {
        const items = store.collection(def);
        for (const doc of shuffled([...t1, ...t2])) await items.insert(doc);
      });

      async function all(where: Where<Item>, options: { limit: number; order?: 'asc' | 'desc' }) {
        const items = store.collection(def);
        const ids: string[] = [];
        let cursor: string | null = null;
        let pages = 0;
        do {
          const page: { items: Item[]; nextCursor: string | null } = await items.find(where, { ...options, cursor });
          expect(page.items.length).toBeLessThanOrEqual(options.limit);
          ids.push(...page.items.map((d) => d.id));
          cursor = page.nextCursor;
          pages++;
        } while (cursor && pages < 100);
        return { ids, pages };
      }

      test('pages newest first across ties without losing or repeating an item', async () => {
        for (const limit of [1, 3, 4, 7, 32, 100]) {
          const { ids, pages } = await all({ tenantId: 't1' }, { limit });
          expect(ids).toEqual(desc);
          expect(pages).toBe(Math.max(1, Math.ceil(32 / limit)));
        }
      });

      test('pages oldest first when asked', async () => {
        for (const limit of [1, 5, 32]) {
          expect((await all({ tenantId: 't1' }, { limit, order: 'asc' })).ids).toEqual([...desc].reverse());
        }
      });

      test('filters by several fields while paging', async () => {
        const odd = desc.filter((id) => Number(id.slice(3)) % 2 === 1);
        expect((await all({ tenantId: 't1', tag: 'odd' }, { limit: 4 })).ids).toEqual(odd);
        expect((await all({ tenantId: 't2' }, { limit: 2 })).ids.sort()).toEqual(t2.map((d) => d.id).sort());
        expect((await all({ tenantId: 't3' }, { limit: 2 })).ids).toEqual([]);
      });

      test('the last page has no next cursor; an exact fit does not yield an empty page', async () => {
        const items = store.collection(def);
        const first = await items.find({ tenantId: 't2' }, { limit: 5 });
        expect(first.items).toHaveLength(5);
        expect(first.nextCursor).toBeNull();
        const empty = await items.find({ tenantId: 'none' });
        expect(empty).toEqual({ items: [], nextCursor: null });
      });

      test('a limit is clamped to 1..1000 and defaults to 20', async () => {
        const items = store.collection(def);
        expect((await items.find({ tenantId: 't1' })).items).toHaveLength(20);
        expect((await items.find({ tenantId: 't1' }, { limit: 0 })).items).toHaveLength(1);
        expect((await items.find({ tenantId: 't1' }, { limit: -5 })).items).toHaveLength(1);
        expect((await items.find({ tenantId: 't1' }, { limit: 2.9 })).items).toHaveLength(2);
        expect((await items.find({ tenantId: 't1' }, { limit: Number.NaN })).items).toHaveLength(20);
      });

      test('a range on the sort field bounds the pages, exclusive or inclusive, in both orders and with filters', async () => {
        const at = (day: number) => `2024-01-0${day}T00:00:00.000Z`;
        const inDays = (ids: string[], from: number, to: number) =>
          ids.filter((id) => {
            const c = t1.find((d) => d.id === id)!.createdAt;
            return typeof c === 'string' && c >= at(from) && c <= at(to);
          });
        const items = store.collection(def);
        const pages = async (where: Where<Item>, options: FindOptions) => {
          const ids: string[] = [];
          let cursor = options.cursor ?? null;
          do {
            const page: Page<Item> = await items.find(where, { ...options, cursor });
            ids.push(...page.items.map((d) => d.id));
            cursor = page.nextCursor;
          } while (cursor);
          return ids;
        };
        for (const limit of [1, 4, 100]) {
          expect(await pages({ tenantId: 't1' }, { limit, range: { gt: at(2), lt: at(5) } })).toEqual(inDays(desc, 3, 4));
          expect(await pages({ tenantId: 't1' }, { limit, range: { gte: at(2), lte: at(5) } })).toEqual(inDays(desc, 2, 5));
          expect(await pages({ tenantId: 't1' }, { limit, order: 'asc', range: { gt: at(4) } })).toEqual(inDays([...desc].reverse(), 5, 6));
        }
        // One bound alone; a filter beside it; nothing without a sort value is ever in a range.
        expect(await pages({ tenantId: 't1' }, { limit: 3, range: { lt: at(2) } })).toEqual(inDays(desc, 1, 1));
        const odd = inDays(desc, 2, 3).filter((id) => Number(id.slice(3)) % 2 === 1);
        expect(await pages({ tenantId: 't1', tag: 'odd' }, { limit: 2, range: { gte: at(2), lt: at(4) } })).toEqual(odd);
        expect(await pages({ tenantId: 't1' }, { limit: 50, range: { gte: '' } })).toHaveLength(30);
        expect(await pages({ tenantId: 't1' }, { limit: 5, range: { gt: at(6) } })).toEqual([]);
        // A cursor of the unbounded query goes on within the range.
        const first = await items.find({ tenantId: 't1' }, { limit: 7 });
        const rest = await pages({ tenantId: 't1' }, { limit: 4, cursor: first.nextCursor, range: { gte: at(2) } });
        expect(rest).toEqual(inDays(desc.slice(7), 2, 6));
      });

      test('a range must be one lower and one upper bound of strings or numbers', async () => {
        const items = store.collection(def);
        const bad: unknown[] = [
          { gt: null },
          { gt: { $gt: '' } },
          { lt: ['x'] },
          { gt: 'a', gte: 'a' },
          { lt: 1, lte: 2 },
          { after: 'x' },
          { gt: Number.NaN },
          'gt',
        ];
        for (const range of bad)
          await expect(items.find({ tenantId: 't1' }, { range: range as FindOptions['range'] })).rejects.toThrow(/range/);
      });

      test('an invalid cursor throws InvalidCursorError', async () => {
        const items = store.collection(def);
        const bad = [
          'not a cursor!',
          Buffer.from('{}').toString('base64url'),
          Buffer.from('[1]').toString('base64url'),
          Buffer.from('[{"$gt":""},"id"]').toString('base64url'),
          Buffer.from('["x",{"$ne":null}]').toString('base64url'),
          encodeCursor('x', 'y') + 'A'.repeat(600),
        ];
        for (const cursor of bad) {
          await expect(items.find({ tenantId: 't1' }, { cursor })).rejects.toBeInstanceOf(InvalidCursorError);
        }
        // A well-formed cursor from elsewhere is just a position.
        const page = await items.find({ tenantId: 't1' }, { cursor: encodeCursor('2024-01-03T00:00:00.000Z', 'id-zzz') });
        expect(page.items[0].createdAt).toBe('2024-01-03T00:00:00.000Z');
      });
    });

    test('a limit above 1000 returns 1000 items and a cursor', async () => {
      const def = itemsDef();
      await store.transaction(async (tx) => {
        const items = tx.collection(def);
        for (let i = 0; i < 1001; i++) await items.insert(item({ id: `bulk-${i}` }));
      });
      const page = await store.collection(def).find({ tenantId: 't1' }, { limit: 5000 });
      expect(page.items).toHaveLength(1000);
      expect(page.nextCursor).not.toBeNull();
      const rest = await store.collection(def).find({ tenantId: 't1' }, { limit: 5000, cursor: page.nextCursor });
      expect(rest.items).toHaveLength(1);
      expect(rest.nextCursor).toBeNull();
    });

    test('find orders by a numeric sort field', async () => {
      const items = store.collection(itemsDef({ name: `numbers_${++seq}`, sortField: 'n', indexes: [{ fields: ['tenantId'] }] }));
      const values = [5, -1, 2.5, 5, 100, 0, 2.5, 1e12];
      for (const [i, n] of values.entries()) await items.insert(item({ id: `n${i}`, n }));
      const asc: number[] = [];
      let cursor: string | null = null;
      do {
        const page: { items: Item[]; nextCursor: string | null } = await items.find({ tenantId: 't1' }, { limit: 3, order: 'asc', cursor });
        asc.push(...page.items.map((d) => d.n!));
        cursor = page.nextCursor;
      } while (cursor);
      expect(asc).toEqual([...values].sort((a, b) => a - b));
    });

    test('update is a compare-and-set on where', async () => {
      const items = store.collection(itemsDef());
      const doc = await items.insert(item({ tag: 'draft', n: 1 }));
      expect(await items.update(doc.id, { tag: 'published' }, { tag: 'archived' })).toBeNull();
      expect(await items.update(doc.id, { tenantId: 't2' }, { tag: 'archived' })).toBeNull();
      expect(await items.get(doc.id)).toEqual(doc);
      const updated = await items.update(doc.id, { tenantId: 't1', tag: 'draft' }, { tag: 'published', n: 2 });
      expect(updated).toEqual({ ...doc, tag: 'published', n: 2 });
      expect(await items.get(doc.id)).toEqual(updated);
      expect(await items.update('missing', {}, { tag: 'x' })).toBeNull();
      // Only one of two racing compare-and-sets on the same expected state wins.
      const results = await Promise.all([
        items.update(doc.id, { tag: 'published' }, { tag: 'a' }),
        items.update(doc.id, { tag: 'published' }, { tag: 'b' }),
      ]);
      expect(results.filter((r) => r !== null)).toHaveLength(1);
    });

    test('update ignores undefined fields, sets nulls, and replaces nested values whole', async () => {
      const items = store.collection(itemsDef());
      const doc = await items.insert(item({ tag: 'x', n: 1, meta: { a: 1, b: ['x'] } }));
      const updated = await items.update(doc.id, {}, { tag: undefined, n: undefined, name: 'renamed' });
      expect(updated).toEqual({ ...doc, name: 'renamed' });
      const nulled = await items.update(doc.id, {}, { tag: null, meta: { a: 2 } });
      expect(nulled).toEqual({ ...doc, name: 'renamed', tag: null, meta: { a: 2 } });
      expect((await items.findOne({ id: doc.id, tag: null }))?.id).toBe(doc.id);
      expect(await items.update(doc.id, {}, {})).toEqual(nulled); // an empty patch just reads
      expect(await items.update(doc.id, {}, { id: doc.id, note: 'same id is fine' })).toMatchObject({ note: 'same id is fine' });
      await expect(items.update(doc.id, {}, { id: 'other' })).rejects.toThrow(/id/);
    });

    test('increment adds atomically, including concurrent calls', async () => {
      const items = store.collection(itemsDef());
      const doc = await items.insert(item({ n: 10 }));
      expect((await items.increment(doc.id, { tenantId: 't1' }, { n: 5 }))?.n).toBe(15);
      expect(await items.increment(doc.id, { tenantId: 't2' }, { n: 5 })).toBeNull();
      expect(await items.increment('missing', {}, { n: 1 })).toBeNull();
      await Promise.all(Array.from({ length: 50 }, () => items.increment(doc.id, { tenantId: 't1' }, { n: 1 })));
      expect((await items.get(doc.id))?.n).toBe(65);
      expect((await items.increment(doc.id, {}, { n: -65 }))?.n).toBe(0);
      // A missing field counts from zero; doubles add exactly as in JavaScript.
      const fresh = await items.insert(item());
      expect((await items.increment(fresh.id, {}, { n: 0.1 }))?.n).toBe(0.1);
      expect((await items.increment(fresh.id, {}, { n: 0.2 }))?.n).toBe(0.1 + 0.2);
      expect(await items.get(fresh.id)).toEqual({ ...fresh, n: 0.1 + 0.2 });
      await expect(items.increment(fresh.id, {}, { n: Number.NaN })).rejects.toThrow();
    });

    test('delete, deleteMany and count', async () => {
      const items = store.collection(itemsDef());
      const a = await items.insert(item({ tag: 'x' }));
      await items.insert(item({ tag: 'x' }));
      await items.insert(item({ tag: 'y' }));
      await items.insert(item({ tenantId: 't2', tag: 'x' }));
      expect(await items.count({})).toBe(4);
      expect(await items.count({ tenantId: 't1' })).toBe(3);
      expect(await items.delete(a.id, { tenantId: 't2' })).toBe(false);
      expect(await items.delete(a.id, { tenantId: 't1' })).toBe(true);
      expect(await items.delete(a.id)).toBe(false);
      expect(await items.get(a.id)).toBeNull();
      expect(await items.deleteMany({ tenantId: 't1', tag: 'x' })).toBe(1);
      expect(await items.deleteMany({ tenantId: 't1', tag: 'x' })).toBe(0);
      expect(await items.count({ tenantId: 't1' })).toBe(1);
      expect(await items.count({ tenantId: 't2' })).toBe(1);
    });

    test('a transaction commits every write together and returns its result', async () => {
      const def = itemsDef();
      const existing = await store.collection(def).insert(item({ n: 1 }));
      const a = item();
      const b = item();
      const result = await store.transaction(async (tx) => {
        const items = tx.collection(def);
        await items.insert(a);
        await items.insert(b);
        await items.increment(existing.id, {}, { n: 1 });
        expect(await items.get(a.id)).toEqual(a); // reads its own writes
        return 'done';
      });
      expect(result).toBe('done');
      const items = store.collection(def);
      expect(await items.get(a.id)).toEqual(a);
      expect(await items.get(b.id)).toEqual(b);
      expect((await items.get(existing.id))?.n).toBe(2);
    });

    test('a transaction that throws leaves nothing behind', async () => {
      const def = itemsDef();
      const existing = await store.collection(def).insert(item({ n: 1, tag: 'before' }));
      const a = item();
      const failure = store.transaction(async (tx) => {
        const items = tx.collection(def);
        await items.insert(a);
        await items.update(existing.id, {}, { tag: 'after' });
        await items.increment(existing.id, {}, { n: 10 });
        await items.delete(existing.id);
        throw new Error('boom');
      });
      await expect(failure).rejects.toThrow('boom');
      const items = store.collection(def);
      expect(await items.get(a.id)).toBeNull();
      expect(await items.get(existing.id)).toEqual(existing);
      expect(await items.count({})).toBe(1);
    });

    test('a DuplicateKeyError inside a transaction rolls it back', async () => {
      const def = itemsDef();
      const existing = await store.collection(def).insert(item());
      const a = item();
      const failure = store.transaction(async (tx) => {
        await tx.collection(def).insert(a);
        await tx.collection(def).insert({ ...existing });
      });
      await expect(failure).rejects.toBeInstanceOf(DuplicateKeyError);
      expect(await store.collection(def).get(a.id)).toBeNull();
    });

    test('a DuplicateKeyError caught inside a transaction still dooms it: later operations fail, nothing commits', async () => {
      const def = itemsDef();
      const existing = await store.collection(def).insert(item({ email: 'taken@example.com', n: 1 }));
      const [a, b] = [item(), item()];
      let caught: unknown = null;
      const failure = store.transaction(async (tx) => {
        const items = tx.collection(def);
        await items.insert(a);
        await items.increment(existing.id, {}, { n: 1 });
        caught = await items.insert(item({ email: 'taken@example.com' })).catch((err: unknown) => err);
        // MongoDB has aborted the transaction on the server; SQLite behaves the same.
        await expect(items.insert(b)).rejects.toBeInstanceOf(DuplicateKeyError);
        await expect(items.get(a.id)).rejects.toBeInstanceOf(DuplicateKeyError);
        return 'swallowed';
      });
      await expect(failure).rejects.toBeInstanceOf(DuplicateKeyError);
      expect(caught).toBeInstanceOf(DuplicateKeyError);
      expect((caught as DuplicateKeyError).fields).toEqual(['tenantId', 'email']);
      const items = store.collection(def);
      expect(await items.get(a.id)).toBeNull();
      expect(await items.get(b.id)).toBeNull();
      expect(await items.get(existing.id)).toEqual(existing);
      // The store is usable afterwards, and a fresh transaction commits.
      await store.transaction(async (tx) => void (await tx.collection(def).insert(b)));
      expect(await items.get(b.id)).toEqual(b);
    });

    test('a read started during an open transaction does not observe its uncommitted writes', async () => {
      for (const outcome of ['commit', 'rollback'] as const) {
        const def = itemsDef();
        const items = store.collection(def);
        const existing = await items.insert(item({ tag: 'before' }));
        const doc = item();
        let release!: () => void;
        const gate = new Promise<void>((resolve) => (release = resolve));
        let written!: () => void;
        const wrote = new Promise<void>((resolve) => (written = resolve));
        const tx = store.transaction(async (t) => {
          await t.collection(def).insert(doc);
          await t.collection(def).update(existing.id, {}, { tag: 'after' });
          written();
          await gate;
          if (outcome === 'rollback') throw new Error('rolled back');
        });
        const settled = tx.then(
          () => 'committed',
          () => 'rolled back',
        );
        await wrote;
        // Started now, while the transaction is open: either answers from committed state at once (MongoDB) or
        // waits until the transaction has finished (SQLite). Never from the transaction's uncommitted state.
        const reads = Promise.all([items.get(doc.id), items.get(existing.id), items.count({ tenantId: 't1' })]);
        const early = await Promise.race([reads, sleep(50).then(() => 'pending' as const)]);
        if (early !== 'pending') expect(early).toEqual([null, existing, 1]);
        release();
        expect(await settled).toBe(outcome === 'commit' ? 'committed' : 'rolled back');
        const late = await reads;
        if (outcome === 'rollback') expect(late).toEqual([null, existing, 1]);
        else if (early === 'pending') expect(late).toEqual([doc, { ...existing, tag: 'after' }, 2]);
        expect(await items.get(doc.id)).toEqual(outcome === 'commit' ? doc : null);
      }
    });

    test('concurrent transactions both commit', async () => {
      const def = itemsDef();
      await Promise.all(
        [0, 1].map((k) =>
          store.transaction(async (tx) => {
            for (let i = 0; i < 3; i++) {
              await tx.collection(def).insert(item({ id: `tx${k}-${i}` }));
              await sleep(1);
            }
          }),
        ),
      );
      expect(await store.collection(def).count({ tenantId: 't1' })).toBe(6);
    });

    test('inside a transaction, a nested transaction or a store-level operation is refused at once (checked mode), never left hanging', async () => {
      // Jest runs with STORE_TX_FLOW_CHECK=1 (test/setup/store-check.ts): the store follows the callback's flow only to
      // refuse what goes around its session; without the check nothing joins (tx-flow.ts, and sqlite.test.ts for
      // SQLite's lock wait limit).
      const def = itemsDef();
      const a = item();
      const outside = store.collection(def);
      const refusals: unknown[] = [];
      const done = store.transaction(async (tx) => {
        await tx.collection(def).insert(a);
        refusals.push(await store.transaction(async (inner) => inner.collection(def).insert(item())).catch((err: unknown) => err));
        await sleep(1); // later in the same flow, after a timer
        refusals.push(await outside.get(a.id).catch((err: unknown) => err));
        refusals.push(await outside.insert(item()).catch((err: unknown) => err));
        expect(await tx.collection(def).get(a.id)).toEqual(a); // the session works on
        return 'committed';
      });
      expect(await done).toBe('committed');
      expect(refusals).toHaveLength(3);
      for (const refusal of refusals) expect(refusal).toBeInstanceOf(TxFlowError);
      // Only the session's write is there, and the store serves calls outside any transaction as before.
      expect((await outside.find({})).items).toEqual([a]);
      // A transaction started beside an open one (not inside its callback) is not refused: it waits or runs alongside.
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      const first = store.transaction(async (tx) => {
        await tx.collection(def).insert(item({ id: 'beside-1' }));
        await gate;
      });
      const second = store.transaction(async (tx) => void (await tx.collection(def).insert(item({ id: 'beside-2' }))));
      const read = outside.count({});
      release();
      await Promise.all([first, second]);
      expect(await read).toBeGreaterThanOrEqual(1);
      expect(await outside.count({})).toBe(3);
    });

    test('a collection first used in a rolled-back transaction still works afterwards', async () => {
      const def = itemsDef();
      await expect(
        store.transaction(async (tx) => {
          await tx.collection(def).insert(item());
          throw new Error('nope');
        }),
      ).rejects.toThrow('nope');
      const doc = await store.collection(def).insert(item({ email: 'x@example.com' }));
      expect(await store.collection(def).count({})).toBe(1);
      await expect(store.collection(def).insert(item({ email: 'x@example.com' }))).rejects.toBeInstanceOf(DuplicateKeyError);
      expect(await store.collection(def).get(doc.id)).toEqual(doc);
    });

    test('a transaction’s collections refuse work after it has finished', async () => {
      const def = itemsDef();
      let leaked: ReturnType<typeof store.collection<Item>> | null = null;
      await store.transaction(async (tx) => {
        leaked = tx.collection(def);
      });
      await expect(leaked!.insert(item())).rejects.toThrow(/finished/);
    });

    test('values that look like operators or code are stored and matched literally', async () => {
      const items = store.collection(itemsDef());
      const names = ['$gt', '{"$gt": ""}', '$where', '__proto__', 'constructor', "x' OR '1'='1", '%', '_', 'a.b', '$.name', '?'];
      for (const value of names) await items.insert(item({ name: value, tag: value, note: value }));
      await items.insert(item({ name: 'plain', tag: 'plain' }));
      for (const value of names) {
        const page = await items.find({ name: value });
        expect(page.items.map((d) => d.note)).toEqual([value]);
        expect((await items.findOne({ tenantId: 't1', tag: value }))?.name).toBe(value);
        expect(await items.count({ note: value })).toBe(1);
      }
      const doc = await items.insert(item({ name: 'target' }));
      expect((await items.update(doc.id, { name: 'target' }, { tag: '$set' }))?.tag).toBe('$set');
    });

    test('operator objects, bad ids and bad names are refused', async () => {
      const items = store.collection(itemsDef());
      const doc = await items.insert(item({ name: 'secret' }));
      const operator = { $gt: '' } as unknown as string;
      await expect(items.find({ name: operator })).rejects.toThrow();
      await expect(items.findOne({ tenantId: { $ne: 'x' } as unknown as string })).rejects.toThrow();
      await expect(items.get(doc.id, { name: ['secret'] as unknown as string })).rejects.toThrow();
      await expect(items.count({ name: new Date() as unknown as string })).rejects.toThrow();
      await expect(items.get({ $ne: null } as unknown as string)).rejects.toThrow();
      await expect(items.delete({ $gt: '' } as unknown as string)).rejects.toThrow();
      await expect(items.deleteMany({ ['$where' as 'name']: '1' })).rejects.toThrow(/invalid field/);
      await expect(items.findOne({ ['a.b' as 'name']: 'x' })).rejects.toThrow(/invalid field/);
      await expect(items.update(doc.id, {}, { ['x"; DROP TABLE x; --' as 'name']: 'x' })).rejects.toThrow(/invalid field/);
      await expect(items.increment(doc.id, {}, { ['$inc' as 'n']: 1 })).rejects.toThrow(/invalid field/);
      // undefined never widens a query (a missing tenant id must not match every tenant)
      await expect(items.find({ tenantId: undefined })).rejects.toThrow();
      await expect(items.insert({ ...item(), id: '' })).rejects.toThrow();
      expect(() => store.collection({ name: 'bad-name' })).toThrow(/invalid collection/);
      expect(() => store.collection({ name: 'x"; DROP TABLE y' })).toThrow(/invalid collection/);
      expect(() => store.collection<Item>({ name: 'ok', indexes: [{ fields: ['name.x' as 'name'] }] })).toThrow(/invalid/);
      expect(await items.count({})).toBe(1);
      expect(await items.get(doc.id)).toEqual(doc);
    });

    test('unicode and large strings round-trip and match exactly', async () => {
      const items = store.collection(itemsDef());
      const composed = 'caf\u00e9';
      const decomposed = 'cafe\u0301';
      const names = [composed, decomposed, '日本語のテキスト', '👩‍👩‍👧 emoji', 'Ωμέγα', 'tab\tnew\nline', 'quote " and \\ backslash'];
      for (const name of names) await items.insert(item({ name, tag: name }));
      for (const name of names) {
        expect((await items.find({ name })).items.map((d) => d.name)).toEqual([name]);
        expect((await items.findOne({ tenantId: 't1', tag: name }))?.name).toBe(name);
      }
      const big = '🎉'.repeat(1000) + 'x'.repeat(1024 * 1024) + 'é';
      const doc = await items.insert(item({ note: big, name: 'big' }));
      expect((await items.get(doc.id))?.note).toBe(big);
      expect(await items.count({ note: big })).toBe(1);
      expect(await items.count({ note: big.slice(0, -1) })).toBe(0);
    });
  });
}
