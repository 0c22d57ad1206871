import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openSqliteStore, type Store } from '@svc/kit';
import { ALL_COLLECTIONS, ledger, type EntryDoc } from './collections';
import { parseUsageQuery, recordUsageRollups, usageRollups, usageRows } from './usage-analytics';

let dir: string;
let store: Store;
const T = 'ten_usage';
const H = 3600_000;
const BASE = Date.parse('2025-03-30T00:00:00.000Z');

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'billing-usage-'));
  store = await openSqliteStore({ path: join(dir, 'billing.db') });
  for (const c of [...ALL_COLLECTIONS, usageRollups]) await store.ensure(c as Parameters<Store['ensure']>[0]);
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const MODELS = ['openai/a', 'openai/b'];
const KEYS = ['', 'key_1', 'key_2'];
const PROJECTS = ['', 'prj_1'];
const AGENTS = ['', 'agt_1', 'agt_2'];

/** A usage entry at `at`, stored as addEntry stores one, with its rollups (as events.ts applies it). */
async function debit(i: number, at: number): Promise<EntryDoc> {
  const createdAt = new Date(at).toISOString();
  const entry: EntryDoc = {
    id: `cre_${i}`,
    tenantId: i % 11 === 0 ? 'ten_other' : T,
    sourceKey: `usage:call:${i}`,
    kind: 'usage',
    credits: -(1 + (i % 5)),
    description: '',
    createdAt,
    hour: `${createdAt.slice(0, 13)}:00:00.000Z`,
    usage: {
      model: MODELS[i % 2],
      apiKeyId: KEYS[i % 3],
      projectId: PROJECTS[i % 2 === 0 ? (i >> 1) % 2 : 1],
      agentId: AGENTS[i % 3 === 1 ? 0 : i % 3],
      inputTokens: 10 + i,
      outputTokens: i % 7,
    },
  };
  await store.transaction(async (tx) => {
    await tx.collection(ledger).insert(entry);
    await recordUsageRollups(tx, entry);
  });
  return entry;
}

const GROUP_SETS = [[], ['model'], ['apiKey'], ['project', 'agent'], ['model', 'apiKey', 'project', 'agent']];

test('every window and grouping sums to the usage debits with from <= at < to, to the millisecond', async () => {
  const entries: EntryDoc[] = [];
  // Three days of calls, some on the hour and day boundaries exactly.
  for (let i = 0; i < 400; i++) {
    const at = i % 17 === 0 ? BASE + (i % 72) * H : i % 19 === 0 ? BASE + 24 * H : BASE + Math.floor((i * 7919 * 1000) % (72 * H));
    entries.push(await debit(i, at));
  }
  entries.push(await debit(1000, BASE - 1), await debit(1001, BASE + 72 * H));
  const windows: Array<[number, number]> = [
    [BASE, BASE + 72 * H],
    [BASE + 24 * H, BASE + 48 * H],
    [BASE + 90 * 60_000 + 1, BASE + 50 * H + 17], // partial hours at both ends, whole hours and a whole day between
    [BASE + 5 * H + 10, BASE + 5 * H + 40 * 60_000], // inside one hour
    [BASE - 10 * H, BASE + 100 * H],
  ];
  for (const [from, to] of windows) {
    const mine = entries.filter((e) => e.tenantId === T && Date.parse(e.createdAt) >= from && Date.parse(e.createdAt) < to);
    const want = {
      calls: mine.length,
      inputTokens: mine.reduce((n, e) => n + e.usage!.inputTokens, 0),
      outputTokens: mine.reduce((n, e) => n + e.usage!.outputTokens, 0),
      credits: mine.reduce((n, e) => n - e.credits, 0),
    };
    expect(want.calls).toBeGreaterThan(0);
    for (const granularity of ['hour', 'day'])
      for (const groupBy of GROUP_SETS) {
        const q = parseUsageQuery({ from: new Date(from).toISOString(), to: new Date(to).toISOString(), granularity, groupBy });
        const rows = await usageRows(store, T, q);
        const got = { calls: 0, inputTokens: 0, outputTokens: 0, credits: 0 };
        for (const r of rows) for (const k of Object.keys(got) as Array<keyof typeof got>) got[k] += Number(r[k]);
        expect({ from, to, granularity, groupBy, ...got }).toEqual({ from, to, granularity, groupBy, ...want });
        const unit = granularity === 'hour' ? H : 24 * H;
        for (const r of rows) expect(Date.parse(r.start) % unit).toBe(0);
      }
  }
});

test('rows are bucketed and grouped: one row per bucket and group, ungrouped fields empty', async () => {
  await debit(1, BASE + 10 * 60_000); // model b, key_1
  await debit(3, BASE + 20 * 60_000); // model b, no key
  await debit(2, BASE + 2 * H); // model a, key_2
  const q = (granularity: string, groupBy: string[]) =>
    usageRows(store, T, parseUsageQuery({ from: '2025-03-30T00:00:00Z', to: '2025-03-31T00:00:00Z', granularity, groupBy }));
  expect(await q('day', [])).toEqual([
    {
      start: '2025-03-30T00:00:00.000Z',
      model: '',
      apiKeyId: '',
      projectId: '',
      agentId: '',
      calls: 3,
      inputTokens: 36,
      outputTokens: 6,
      credits: 9,
    },
  ]);
  expect((await q('hour', ['model'])).map((r) => [r.start, r.model, r.calls])).toEqual([
    ['2025-03-30T00:00:00.000Z', 'openai/b', 2],
    ['2025-03-30T02:00:00.000Z', 'openai/a', 1],
  ]);
  expect((await q('day', ['apiKey'])).map((r) => [r.apiKeyId, r.model, r.calls])).toEqual([
    ['', '', 1],
    ['key_1', '', 1],
    ['key_2', '', 1],
  ]);
});

test('bad parameters are refused naming each field', () => {
  const fieldsOf = (req: Partial<Parameters<typeof parseUsageQuery>[0]>) => {
    try {
      parseUsageQuery({ from: '', to: '', granularity: 'day', groupBy: [], ...req });
    } catch (err) {
      return ((err as { details: { fields: Array<{ field: string }> } }).details.fields ?? []).map((f) => f.field);
    }
    return [];
  };
  expect(fieldsOf({})).toEqual(['from', 'to']);
  expect(fieldsOf({ from: 'yesterday', to: '2025-01-01T00:00:00Z' })).toEqual(['from']);
  expect(fieldsOf({ from: '2025-01-02T00:00:00Z', to: '2025-01-01T00:00:00Z' })).toEqual(['to']);
  expect(fieldsOf({ from: '2024-01-01T00:00:00Z', to: '2025-01-02T00:00:00Z' })).toEqual(['to']);
  expect(fieldsOf({ from: '2024-01-01T00:00:00Z', to: '2025-01-01T00:00:00Z' })).toEqual([]); // 366 days: allowed
  expect(fieldsOf({ from: '2025-01-01', to: '2025-01-02', granularity: 'week' })).toEqual(['granularity']);
  expect(fieldsOf({ from: '2025-01-01', to: '2025-01-02', groupBy: ['model', 'tenant'] })).toEqual(['groupBy']);
});

test('more than 10,000 rows is refused (400 too_many_rows), 10,000 are answered', async () => {
  const write = (n: number, offset: number) =>
    store.transaction(async (tx) => {
      for (let i = offset; i < offset + n; i++) {
        const createdAt = new Date(BASE + (i % 24) * H).toISOString();
        const entry: EntryDoc = {
          id: `cre_many${i}`,
          tenantId: T,
          sourceKey: `usage:call:many${i}`,
          kind: 'usage',
          credits: -1,
          description: '',
          createdAt,
          hour: `${createdAt.slice(0, 13)}:00:00.000Z`,
          usage: { model: 'openai/a', apiKeyId: `key_${i}`, projectId: '', agentId: '', inputTokens: 1, outputTokens: 0 },
        };
        await tx.collection(ledger).insert(entry);
        await recordUsageRollups(tx, entry);
      }
    });
  await write(10_000, 0);
  const q = parseUsageQuery({ from: '2025-03-30T00:00:00Z', to: '2025-03-31T00:00:00Z', granularity: 'day', groupBy: ['apiKey'] });
  expect((await usageRows(store, T, q)).length).toBe(10_000);
  await write(1, 10_000);
  await expect(usageRows(store, T, q)).rejects.toMatchObject({ code: 'VALIDATION_ERROR', details: { reason: 'too_many_rows' } });
});
