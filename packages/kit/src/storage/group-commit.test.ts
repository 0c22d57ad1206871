/** Group commit on a real SQLite store: writes of one turn share a transaction, each gets its own result. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AppError } from '../errors';
import { openSqliteStore } from './sqlite';
import type { Store } from './types';
import { GroupCommit } from './group-commit';

const items = { name: 'items' };
let dir: string;
let store: Store;
let transactions: number;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'kit-group-commit-'));
  const sqlite = openSqliteStore({ path: join(dir, 'store.db') });
  transactions = 0;
  // The store as the batch sees it, counting the transactions it opens.
  store = Object.assign(Object.create(sqlite) as Store, {
    transaction: (fn: Parameters<Store['transaction']>[0]) => {
      transactions++;
      return sqlite.transaction(fn);
    },
  });
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

it('commits the writes asked for in one turn in one transaction, each resolved with its own result', async () => {
  const group = new GroupCommit(store);
  const results = await Promise.all(
    ['a', 'b', 'c'].map((id) => group.commit(async (tx) => (await tx.collection(items).insert({ id })).id.toUpperCase())),
  );
  expect(results).toEqual(['A', 'B', 'C']);
  expect(transactions).toBe(1);
  expect((await store.collection(items).find({})).items.map((d) => d.id).sort()).toEqual(['a', 'b', 'c']);
  // A later turn: a transaction of its own.
  await group.commit((tx) => tx.collection(items).insert({ id: 'd' }));
  expect(transactions).toBe(2);
});

it('fails every write of a batch that fails, and stores none of them', async () => {
  const group = new GroupCommit(store);
  const ok = group.commit((tx) => tx.collection(items).insert({ id: 'kept' }));
  const bad = group.commit(() => Promise.reject(new Error('refused')));
  await expect(ok).rejects.toThrow('refused');
  await expect(bad).rejects.toThrow('refused');
  expect(await store.collection(items).get('kept')).toBeNull();
});

it('rejects a write that refuses (an AppError before it writes) alone, and commits the rest of its batch', async () => {
  const group = new GroupCommit(store);
  const ok = group.commit(async (tx) => (await tx.collection(items).insert({ id: 'kept' })).id);
  const refused = group.commit(() => Promise.reject(new AppError('RATE_LIMIT_EXCEEDED', 'over the cap')));
  await expect(ok).resolves.toBe('kept');
  await expect(refused).rejects.toMatchObject({ code: 'RATE_LIMIT_EXCEEDED' });
  expect(transactions).toBe(1);
  expect(await store.collection(items).get('kept')).not.toBeNull();
});
