import { InvalidCursorError, type Scalar } from './types';

/** Cursors are opaque to clients: base64url JSON of the last item's sort value and id. */
export function encodeCursor(sortValue: Scalar, id: string): string {
  return Buffer.from(JSON.stringify([sortValue, id])).toString('base64url');
}

export function decodeCursor(cursor: string): { sortValue: Scalar; id: string } {
  try {
    if (typeof cursor !== 'string' || cursor.length > 512) throw new InvalidCursorError();
    const parsed: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (!Array.isArray(parsed) || parsed.length !== 2 || typeof parsed[1] !== 'string') throw new InvalidCursorError();
    const [sortValue, id] = parsed as [unknown, string];
    if (sortValue !== null && !['string', 'number', 'boolean'].includes(typeof sortValue)) throw new InvalidCursorError();
    return { sortValue: sortValue as Scalar, id };
  } catch {
    throw new InvalidCursorError();
  }
}

export function clampLimit(limit: number | undefined): number {
  // NaN (say a non-numeric query string) falls back to the default rather than reaching SQL as NULL.
  if (limit === undefined || Number.isNaN(Number(limit))) return 20;
  return Math.min(1000, Math.max(1, Math.floor(Number(limit))));
}

/**
 * One contiguous run of `find` results. Both engines order a null (or missing) sort value before every other
 * value, and a keyset comparison never matches null, so a page may span the non-null run and the null run:
 * adapters query the segments in order until the page is full. `after` is the cursor position, exclusive.
 */
export interface PageSegment {
  nulls: boolean;
  after?: { sortValue: Scalar; id: string };
}

export function pageSegments(
  order: 'asc' | 'desc',
  cursor: { sortValue: Scalar; id: string } | null,
  /** A range on the sort value is set: no null sort value is in it. */
  ranged = false,
): PageSegment[] {
  if (ranged) {
    if (cursor === null) return [{ nulls: false }];
    // A cursor among the nulls (a page of the same query without the range): what is left of them is out of range.
    if (cursor.sortValue === null) return order === 'asc' ? [{ nulls: false }] : [];
    return [{ nulls: false, after: cursor }];
  }
  const values: PageSegment = { nulls: false };
  const nulls: PageSegment = { nulls: true };
  if (cursor === null) return order === 'desc' ? [values, nulls] : [nulls, values];
  if (cursor.sortValue === null) {
    return order === 'desc' ? [{ nulls: true, after: cursor }] : [{ nulls: true, after: cursor }, values];
  }
  return order === 'desc' ? [{ nulls: false, after: cursor }, nulls] : [{ nulls: false, after: cursor }];
}

/** Turns `limit + 1` fetched rows into a page: the extra row only says that there is a next page. */
export function toPage<T extends { id: string }>(
  rows: T[],
  limit: number,
  sortValueOf: (doc: T) => Scalar,
): { items: T[]; nextCursor: string | null } {
  if (rows.length <= limit) return { items: rows, nextCursor: null };
  const items = rows.slice(0, limit);
  const last = items[items.length - 1];
  return { items, nextCursor: encodeCursor(sortValueOf(last), last.id) };
}
