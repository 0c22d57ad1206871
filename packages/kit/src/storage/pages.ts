import type { Collection, FindOptions, Where } from './types';

/**
 * Every document of `col` matching `where`, a page at a time, in `find`'s order: yields each page's items, the next
 * page asked for only once the loop's body is done with this one (as a hand-written `do { find(..., { cursor }) }
 * while (cursor)` would). So a body may update or delete what it was given; a document it writes that moves ahead of
 * the cursor is met again, as with any keyset page. Breaking out of the loop reads no further page. The first page
 * is yielded even when empty.
 */
export async function* pages<T extends { id: string }>(
  col: Collection<T>,
  where: Where<T>,
  options: Omit<FindOptions, 'cursor'> = {},
): AsyncGenerator<T[], void, undefined> {
  let cursor: string | null = null;
  do {
    const page = await col.find(where, { ...options, cursor });
    yield page.items;
    cursor = page.nextCursor;
  } while (cursor);
}
