import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sha256Hex } from './crypto';
import { AppError } from './errors';
import {
  amendIdempotentAnswer,
  claimIdempotencyKey,
  forgetIdempotencyKey,
  idempotency,
  idempotencyRecordId,
  idempotencyRetention,
  idempotent,
} from './idempotency';
import { LeaseWatch, newHolderId } from './lease';
import { createLogger } from './logger';
import { openSqliteStore, type Store } from './storage';

// Idempotency-Key records on a real SQLite store: swept once past their 24 h (time injected, never slept), work that
// must not run twice is answered, not run again, after its holder died, and answers amended or freed afterwards.
const HOUR = 3_600_000;
const dir = mkdtempSync(join(tmpdir(), 'kit-idem-'));
let store: Store;
let files = 0;
const logger = createLogger('test', 'silent');

beforeEach(async () => {
  store = openSqliteStore({ path: join(dir, `idem-${++files}.db`) });
  await store.ensure(idempotency);
});
afterEach(() => store.close());
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const scope = (key: string, body: unknown = { a: 1 }) => ({ tenantId: 'ten_a', operation: 'op', key, body });
const once = (key: string, result: unknown = { n: 1 }) => idempotent(store, scope(key), async () => result);
const ids = async () => (await store.collection(idempotency).find({}, { limit: 100 })).items.map((d) => d.id).sort();

it('sweeps the records past their 24 h, on any number of replicas at once, and keeps a key claimed afresh meanwhile', async () => {
  await once('k1');
  await once('k2');
  const at = (ms: number) => () => Date.now() + ms;
  expect(await idempotencyRetention(store, logger, at(23 * HOUR)).sweep()).toBe(0);
  expect(await ids()).toHaveLength(2);
  // Two replicas sweep at once: each record is deleted once.
  const [a, b] = await Promise.all([0, 1].map(() => idempotencyRetention(store, logger, at(25 * HOUR)).sweep()));
  expect([a + b, await ids()]).toEqual([2, []]);

  // Read as past its 24 h, then claimed afresh (at the sweep's time) before the sweep's delete: kept.
  await once('k3');
  const original = store.transaction.bind(store);
  jest.spyOn(store, 'transaction').mockImplementationOnce(async (fn) => {
    const id = idempotencyRecordId('ten_a', 'op', 'k3');
    await store.collection(idempotency).update(id, {}, { createdAt: new Date(Date.now() + 25 * HOUR).toISOString() });
    return original(fn);
  });
  expect(await idempotencyRetention(store, logger, at(25 * HOUR)).sweep()).toBe(0);
  expect(await ids()).toEqual([idempotencyRecordId('ten_a', 'op', 'k3')]);
});

it('work marked `abandoned` is not run again after its holder died: the error is its answer, replayed', async () => {
  const dead = newHolderId(); // never started: gone at once (kit lease rule)
  const record = { tenantId: 'ten_a', operation: 'op', key: 'k', bodyHash: sha256Hex(JSON.stringify({ a: 1 })) };
  expect((await claimIdempotencyKey(store, record, { holder: dead, watch: new LeaseWatch(), leaseMs: 30_000 })).state).toBe('claimed');
  const work = jest.fn(async () => ({ n: 1 }));
  const interrupted = () => new AppError('SERVICE_UNAVAILABLE', 'interrupted', { reason: 'reply_interrupted' });
  for (let i = 0; i < 2; i++)
    await expect(idempotent(store, scope('k'), work, { abandoned: interrupted })).rejects.toMatchObject({
      code: 'SERVICE_UNAVAILABLE',
      details: { reason: 'reply_interrupted' },
    });
  expect(work).not.toHaveBeenCalled();
  // Without the option the abandoned claim is taken over and the work runs.
  const other = { ...record, key: 'k2' };
  await claimIdempotencyKey(store, other, { holder: dead, watch: new LeaseWatch(), leaseMs: 30_000 });
  await expect(idempotent(store, scope('k2'), work)).resolves.toEqual({ n: 1 });
});

it('an answer can be amended after its commit, or the key freed; one too long to keep frees the key', async () => {
  const id = idempotencyRecordId('ten_a', 'op', 'k');
  await once('k', { messageId: 'm' });
  await store.transaction((tx) => amendIdempotentAnswer(tx, id, { final: 'done' }));
  await expect(once('k')).resolves.toEqual({ messageId: 'm', final: 'done' });
  await store.transaction((tx) => forgetIdempotencyKey(tx, id));
  await expect(once('k', { fresh: true })).resolves.toEqual({ fresh: true });

  const work = jest.fn(async () => ({ long: 'x'.repeat(100) }));
  for (let i = 0; i < 2; i++) await idempotent(store, scope('long'), work, { maxAnswerChars: 50 });
  expect(work).toHaveBeenCalledTimes(2);
});
