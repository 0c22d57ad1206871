/** How commands print: aligned tables, a record's fields, and the column cells of common values. */

/** Rows of cells as columns padded to their widest cell; the first row is the header. */
export function table(rows: string[][]): string {
  if (rows.length <= 1) return '(none)';
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i]))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** A cell for any value: text as it is, lists joined, nothing as empty, anything else as JSON. */
export function cell(value: unknown): string {
  if (value === undefined || value === null) return '';
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) return value.map(cell).join(',');
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

/** A column: its header and the record's cell (a field name, or a function of the record). */
export type Column<T = any> = [header: string, field: string | ((row: T) => unknown)];

export function rowsOf<T>(columns: Column<T>[], items: T[]): string[][] {
  const value = (item: T, field: Column<T>[1]) =>
    cell(typeof field === 'function' ? field(item) : (item as Record<string, unknown>)[field]);
  return [columns.map(([h]) => h), ...items.map((item) => columns.map(([, f]) => value(item, f)))];
}

/** One record as `field: value` lines (nested values as JSON). */
export function fields(record: unknown): string {
  if (!record || typeof record !== 'object') return cell(record);
  const entries = Object.entries(record as Record<string, unknown>);
  const width = Math.max(...entries.map(([k]) => k.length));
  return entries.map(([k, v]) => `${`${k}:`.padEnd(width + 1)} ${cell(v)}`).join('\n');
}
