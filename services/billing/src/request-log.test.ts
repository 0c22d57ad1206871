import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, isAppError, openSqliteStore, type Store } from '@svc/kit';
import type { eventsV1 } from '@svc/proto';
import { usageData } from '../test/fixtures/unit';
import { ALL_COLLECTIONS, ledger, reservations } from './collections';
import { applyUsage } from './events';
import { addEntry, applyOnce } from './ledger';
import { parseRequestLogQuery, requestLog, RequestLog, type RequestLogDoc } from './request-log';
import { reserve } from './reservations';

const T = 'ten_log';
const logger = createLogger('billing-test', 'silent');
let dir: string;
let store: Store;
let now = Date.now();
let log: RequestLog;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'billing-request-log-'));
  store = await openSqliteStore({ path: join(dir, 'billing.db') });
  for (const c of [...ALL_COLLECTIONS, requestLog]) await store.ensure(c as Parameters<Store['ensure']>[0]);
  now = Date.now();
  log = new RequestLog(store, { retentionDays: 30, logger, now: () => now });
  for (const t of [T, 'ten_other'])
    await applyOnce(store, (tx) =>
      addEntry(tx, { tenantId: t, sourceKey: `grant:${t}`, kind: 'grant', credits: 1_000_000, description: 'grant' }),
    );
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const call = (over: Partial<eventsV1.ModelCallInfo> = {}): eventsV1.ModelCallInfo => ({
  origin: 'v1',
  requestId: 'req_1',
  endUser: 'alice',
  status: 'ok',
  errorCode: '',
  latencyMs: 120,
  ttftMs: 30,
  entryId: 'mdl_1',
  servedModel: 'gpt-4o-2024',
  userId: 'usr_1',
  ...over,
});

const usage = (callId: string, over: Partial<eventsV1.UsageData> = {}) =>
  usageData(callId, 1200, {
    model: 'fast',
    outputTokens: 300,
    price: { input: 1000, output: 4000, cachedInput: 500, source: 'entry' },
    call: call(),
    ...over,
  });

const all = async (tenantId = T) => (await store.collection(requestLog).find({ tenantId }, { limit: 1000 })).items;

it('keeps one entry per settled call, with the ledger debit as credits, however often the usage comes', async () => {
  const u = usage('c1');
  expect(await applyUsage(store, 1, T, u, 'evt_1')).toBe(3); // 1.2 + 1.2 M micro-credits
  expect(await applyUsage(store, 1, T, u, 'evt_1')).toBe(0);
  const [entry, ...rest] = await all();
  expect(rest).toEqual([]);
  const debit = (await store.collection(ledger).findOne({ sourceKey: 'usage:call:c1' }))!;
  expect(entry).toMatchObject({
    tenantId: T,
    at: debit.createdAt,
    source: 'v1',
    requestId: 'req_1',
    apiKeyId: 'key_1',
    userId: 'usr_1',
    endUser: 'alice',
    model: 'fast',
    servedModel: 'gpt-4o-2024',
    provider: 'openai',
    status: 'ok',
    errorCode: '',
    inputTokens: 1200,
    outputTokens: 300,
    credits: -debit.credits,
    latencyMs: 120,
    ttftMs: 30,
  });
  expect(JSON.stringify(entry)).not.toMatch(/prompt|content/);
  expect(await log.get(T, entry.id)).toEqual(entry);
  expect(await log.get('ten_other', entry.id)).toBeNull();
});

it('keeps a released call that carries its description (credits 0), once; a legacy one is mapped from its source', async () => {
  await reserve(store, { tenantId: T, callId: 'c2', tokens: 5000, source: 'chat_reply', sourceId: 'c2', ttlMs: 60_000 }, 1);
  const failed = usage('c2', { inputTokens: 0, outputTokens: 0, call: call({ status: 'error', errorCode: 'upstream_error' }) });
  await applyUsage(store, 1, T, failed, 'evt_2');
  await applyUsage(store, 1, T, failed, 'evt_2');
  expect((await store.collection(reservations).get(`${T}:c2`))!.status).toBe('released');
  // A release without a description (an older sender) leaves no entry.
  await applyUsage(store, 1, T, usage('c3', { inputTokens: 0, outputTokens: 0, call: undefined }), 'evt_3');
  // Older senders' usage: the source names the path, `model` was the provider's model.
  await applyUsage(store, 1, T, usage('c4', { source: 'agent_run', model: 'gpt-4o', call: undefined, price: undefined }), 'evt_4');
  const entries = await all();
  expect(entries.map((e) => [e.source, e.status, e.errorCode, e.credits, e.servedModel])).toEqual([
    ['agent', 'ok', '', 2, 'gpt-4o'],
    ['v1', 'error', 'upstream_error', 0, 'gpt-4o-2024'],
  ]);
});

it('lists newest first within a window, by each filter and several, in pages, and never past the retention', async () => {
  const docs: RequestLogDoc[] = [];
  const models = ['fast', 'strong'];
  await store.transaction(async (tx) => {
    for (let i = 0; i < 60; i++) {
      const doc: RequestLogDoc = {
        id: `call_${String(i).padStart(3, '0')}`,
        tenantId: i % 10 === 9 ? 'ten_other' : T,
        at: new Date(now - (60 - i) * 60_000 - (i === 0 ? 31 * 86_400_000 : 0)).toISOString(),
        source: (['chat', 'agent', 'v1', 'passthrough', 'mcp'] as const)[i % 5],
        requestId: '',
        apiKeyId: i % 3 === 0 ? 'key_a' : '',
        userId: '',
        endUser: '',
        model: models[i % 2],
        servedModel: '',
        provider: 'openai',
        status: i % 4 === 0 ? 'error' : 'ok',
        errorCode: '',
        inputTokens: i,
        outputTokens: 0,
        credits: 1,
        latencyMs: 0,
        ttftMs: 0,
      };
      await tx.collection(requestLog).insert(doc);
      docs.push(doc);
    }
  });
  const kept = docs.filter((d) => d.tenantId === T && d.id !== 'call_000').reverse();
  const read = async (q: Partial<Parameters<typeof parseRequestLogQuery>[1]>, limit = 7) => {
    const ids: string[] = [];
    let cursor = '';
    do {
      const page = await log.list(
        parseRequestLogQuery(T, { from: '', to: '', model: '', apiKeyId: '', source: '', status: '', ...q, limit, cursor }),
      );
      expect(page.items.length).toBeLessThanOrEqual(limit);
      ids.push(...page.items.map((d) => d.id));
      cursor = page.nextCursor ?? '';
    } while (cursor);
    return ids;
  };
  expect(await read({})).toEqual(kept.map((d) => d.id));
  expect(await read({ model: 'strong' })).toEqual(kept.filter((d) => d.model === 'strong').map((d) => d.id));
  expect(await read({ apiKeyId: 'key_a' })).toEqual(kept.filter((d) => d.apiKeyId === 'key_a').map((d) => d.id));
  expect(await read({ source: 'mcp' })).toEqual(kept.filter((d) => d.source === 'mcp').map((d) => d.id));
  expect(await read({ status: 'error', model: 'fast' })).toEqual(
    kept.filter((d) => d.status === 'error' && d.model === 'fast').map((d) => d.id),
  );
  const from = docs[20].at;
  const to = docs[30].at;
  expect(await read({ from, to }, 3)).toEqual(kept.filter((d) => d.at >= from && d.at < to).map((d) => d.id));
  expect(await log.get(T, 'call_000')).toBeNull();

  // The sweep deletes what is past the retention, and only that.
  expect(await log.sweep()).toBe(1);
  expect(await store.collection(requestLog).get('call_000')).toBeNull();
  expect(await store.collection(requestLog).count({})).toBe(59);
});

it('refuses bad filters with every field named', () => {
  const base = { from: '', to: '', model: '', apiKeyId: '', source: '', status: '', cursor: '', limit: 0 };
  const err = (() => {
    try {
      parseRequestLogQuery(T, { ...base, from: 'yesterday', to: '2025-01-01', source: 'email', status: 'done', limit: 1000 });
    } catch (e) {
      return e;
    }
  })();
  expect(isAppError(err) && err.code).toBe('VALIDATION_ERROR');
  const fields = ((err as { details: { fields: Array<{ field: string }> } }).details.fields ?? []).map((f) => f.field);
  expect(fields.sort()).toEqual(['from', 'limit', 'source', 'status']);
  expect(() => parseRequestLogQuery(T, { ...base, from: '2025-02-01', to: '2025-01-01' })).toThrow();
  expect(parseRequestLogQuery(T, { ...base, from: '2025-01-01', status: 'cancelled' })).toMatchObject({
    from: '2025-01-01T00:00:00.000Z',
    status: 'cancelled',
    limit: 20,
  });
});
