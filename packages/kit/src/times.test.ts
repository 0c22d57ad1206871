import { isoBound, parseIsoInstant } from './times';

test('takes dates and date-times with a zone, to the millisecond', () => {
  expect(parseIsoInstant('2025-03-01')).toEqual({ ms: Date.UTC(2025, 2, 1), subMs: false });
  expect(parseIsoInstant('2025-03-01T12:30Z')?.ms).toBe(Date.UTC(2025, 2, 1, 12, 30));
  expect(parseIsoInstant('2025-03-01T12:30:15.123Z')?.ms).toBe(Date.UTC(2025, 2, 1, 12, 30, 15, 123));
  expect(parseIsoInstant('2025-03-01T14:30:15+02:00')?.ms).toBe(Date.UTC(2025, 2, 1, 12, 30, 15));
  expect(parseIsoInstant('2024-02-29T00:00:00Z')?.ms).toBe(Date.UTC(2024, 1, 29));
  expect(parseIsoInstant('2025-03-01T12:30:15.1234Z')).toEqual({ ms: Date.UTC(2025, 2, 1, 12, 30, 15, 123), subMs: true });
  expect(parseIsoInstant('2025-03-01T12:30:15.1230000Z')?.subMs).toBe(false);
});

test.each([
  ['not a date', 'yesterday'],
  ['no zone (local time)', '2025-03-01T12:00:00'],
  ['an impossible day', '2025-02-30T00:00:00Z'],
  ['February 29 of a common year', '2025-02-29'],
  ['month 13', '2025-13-01T00:00:00Z'],
  ['hour 24', '2025-01-01T24:00:00Z'],
  ['a leap second', '2025-01-01T23:59:60Z'],
  ['a zone past 23:59', '2025-01-01T00:00:00+24:00'],
  ['a space instead of T', '2025-01-01 00:00:00Z'],
  ['an epoch number', '1735689600000'],
  ['the empty string', ''],
  ['a long string', `2025-01-01T00:00:00.${'1'.repeat(40)}Z`],
])('refuses %s', (_label, value) => {
  expect(parseIsoInstant(value)).toBeNull();
});

test('bounds on millisecond timestamps keep the same set when the instant has a finer fraction', () => {
  const exact = parseIsoInstant('2025-03-01T00:00:00.005Z')!;
  const finer = parseIsoInstant('2025-03-01T00:00:00.0055Z')!;
  const at = '2025-03-01T00:00:00.005Z';
  expect(isoBound(exact, 'after')).toEqual({ op: 'gt', iso: at });
  expect(isoBound(exact, 'atOrAfter')).toEqual({ op: 'gte', iso: at });
  expect(isoBound(exact, 'before')).toEqual({ op: 'lt', iso: at });
  // .0055: the millisecond .005 is before it (kept by `before`, left out by `after` and `atOrAfter`).
  expect(isoBound(finer, 'after')).toEqual({ op: 'gt', iso: at });
  expect(isoBound(finer, 'atOrAfter')).toEqual({ op: 'gt', iso: at });
  expect(isoBound(finer, 'before')).toEqual({ op: 'lte', iso: at });
});
