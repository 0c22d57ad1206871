import { pages } from './pages';
import { openSqliteStore } from './sqlite';
import type { CollectionDef, Store } from './types';

interface Item {
  id: string;
  status: 'open' | 'closed';
  createdAt: string;
}
const items: CollectionDef<Item> = { name: 'items', indexes: [{ fields: ['status'] }] };

let store: Store;
beforeEach(async () => {
  store = openSqliteStore({ path: ':memory:' });
  for (let i = 0; i < 7; i++) await store.collection(items).insert({ id: `i${i}`, status: 'open', createdAt: `2026-01-0${i + 1}` });
});
afterEach(() => store.close());

describe('pages', () => {
  test('yields every matching document a page at a time, in find order', async () => {
    const seen: string[][] = [];
    for await (const page of pages(store.collection(items), { status: 'open' }, { limit: 3, order: 'asc' }))
      seen.push(page.map((i) => i.id));
    expect(seen).toEqual([['i0', 'i1', 'i2'], ['i3', 'i4', 'i5'], ['i6']]);
  });

  test('asks for the next page only after the body is done with this one, so the body may change what it got', async () => {
    const col = store.collection(items);
    const find = jest.spyOn(col, 'find');
    const closed: string[] = [];
    // The sweeper's shape: every open item is closed (no longer matches the filter) while the pages go on.
    for await (const page of pages(col, { status: 'open' }, { limit: 2, order: 'asc' })) {
      expect(find).toHaveBeenCalledTimes(closed.length / 2 + 1);
      for (const i of page) if (await col.update(i.id, { status: 'open' }, { status: 'closed' })) closed.push(i.id);
    }
    expect(closed).toEqual(['i0', 'i1', 'i2', 'i3', 'i4', 'i5', 'i6']);
    expect(await col.count({ status: 'open' })).toBe(0);
  });

  test('reads no further page once the loop is left; an empty result is one empty page', async () => {
    const col = store.collection(items);
    const find = jest.spyOn(col, 'find');
    for await (const page of pages(col, { status: 'open' }, { limit: 2 })) {
      expect(page.map((i) => i.id)).toEqual(['i6', 'i5']); // newest first by default, as find
      break;
    }
    expect(find).toHaveBeenCalledTimes(1);
    const empty: Item[][] = [];
    for await (const page of pages(col, { status: 'closed' })) empty.push(page);
    expect(empty).toEqual([[]]);
  });

  test('pages inside a transaction, on its collection', async () => {
    const ids = await store.transaction(async (tx) => {
      const out: string[] = [];
      for await (const page of pages(tx.collection(items), {}, { limit: 4, order: 'asc' })) out.push(...page.map((i) => i.id));
      return out;
    });
    expect(ids).toHaveLength(7);
  });
});
