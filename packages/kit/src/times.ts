/**
 * ISO 8601 instants as the API takes them in queries and bodies (`after`, `since`, `from`, ...): a date
 * (`2025-03-01`, UTC midnight) or a date-time with a zone (`2025-03-01T12:00:00Z`, `...+02:00`), seconds and a
 * fraction optional. Date.parse alone would also take other formats, a date-time without a zone (read in the
 * server's local time) and impossible dates (`2025-02-30` becomes March 2).
 */
const ISO = /^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|[+-](\d{2}):(\d{2})))?$/;

export interface IsoInstant {
  /** Epoch milliseconds (a finer fraction is cut to the millisecond). */
  ms: number;
  /** The fraction went past the millisecond: the instant lies strictly between `ms` and `ms + 1`. */
  subMs: boolean;
}

/** The instant `value` names, or null when it is not one of the forms above or names no real time. */
export function parseIsoInstant(value: string): IsoInstant | null {
  const m = typeof value === 'string' && value.length <= 40 ? ISO.exec(value) : null;
  if (!m) return null;
  const [, y, mo, d, h = '0', mi = '0', s = '0', frac = '', , zh = '0', zm = '0'] = m;
  const year = Number(y);
  const month = Number(mo);
  const day = Number(d);
  const daysInMonth = new Date(Date.UTC(year, month, 0)).getUTCDate();
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth) return null;
  if (Number(h) > 23 || Number(mi) > 59 || Number(s) > 59 || Number(zh) > 23 || Number(zm) > 59) return null;
  const ms = Date.parse(m[4] === undefined ? `${value}T00:00:00Z` : value);
  if (Number.isNaN(ms)) return null;
  return { ms, subMs: /[1-9]/.test(frac.slice(3)) };
}

/**
 * Store bounds (`FindOptions.range`) on ISO timestamps of the `nowIso()` form for "after `a`" (exclusive) or "at or
 * after `a`" (inclusive), and "before `b`" (exclusive): those timestamps carry milliseconds, so a finer fraction is
 * rounded to the bound that keeps the same set.
 */
export function isoBound(instant: IsoInstant, side: 'after' | 'atOrAfter'): { op: 'gt' | 'gte'; iso: string };
export function isoBound(instant: IsoInstant, side: 'before'): { op: 'lt' | 'lte'; iso: string };
export function isoBound(instant: IsoInstant, side: 'after' | 'atOrAfter' | 'before'): { op: 'gt' | 'gte' | 'lt' | 'lte'; iso: string } {
  const iso = new Date(instant.ms).toISOString();
  if (side === 'before') return { op: instant.subMs ? 'lte' : 'lt', iso };
  // After (or at) x.5 ms: the first millisecond in the set is x + 1, i.e. after x.
  if (side === 'atOrAfter') return { op: instant.subMs ? 'gt' : 'gte', iso };
  return { op: 'gt', iso };
}
