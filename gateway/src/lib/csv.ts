/** CSV answers (RFC 4180): `GET /billing/usage` with `Accept: text/csv` (CONTRACT.md 8). */

/** The usage export's columns, in the contract's order; a field a row lacks is an empty cell. */
export const USAGE_COLUMNS = ['start', 'model', 'apiKeyId', 'projectId', 'agentId', 'calls', 'inputTokens', 'outputTokens', 'credits'];

/** True when the Accept header prefers text/csv to JSON (the first of the two it names, q-values aside). */
export function wantsCsv(accept: string | undefined): boolean {
  const types = (accept ?? '')
    .toLowerCase()
    .split(',')
    .map((part) => part.split(';')[0].trim());
  const csv = types.indexOf('text/csv');
  const json = types.indexOf('application/json');
  return csv >= 0 && (json < 0 || csv < json);
}

/** A cell, quoted when it holds a comma, a quote or a line break (quotes doubled). */
export function csvCell(value: unknown): string {
  if (value === null || value === undefined) return '';
  const text = String(value);
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

export function toCsv(columns: string[], rows: Array<Record<string, unknown>>): string {
  const lines = [columns.join(','), ...rows.map((row) => columns.map((c) => csvCell(row[c])).join(','))];
  return `${lines.join('\r\n')}\r\n`;
}

export const usageCsv = (rows: Array<Record<string, unknown>>) => toCsv(USAGE_COLUMNS, rows);
