import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AppError, openSqliteStore, type Store, type StoreSession, type TenantCap } from '@svc/kit';
import { projectCap, projects, type ProjectDoc } from './collections';

// PROJECTS_PER_TENANT: the counter starts from the data already there (written before counters existed), and creates racing
// for the places left get exactly those; a delete gives one back. On this service's real collection and store.
let dir: string;
let store: Store;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'projects-caps-'));
  store = openSqliteStore({ path: join(dir, 'projects.db') });
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

/** `count` creates at once through `cap`; how many got a place (the others must be refused by the cap). */
async function race(cap: TenantCap, tenantId: string, count: number, insert: (i: number) => (tx: StoreSession) => Promise<unknown>) {
  const outcomes = await Promise.allSettled(
    Array.from({ length: count }, (_, i) =>
      cap.transaction(tenantId, async (tx, places) => {
        await places.take();
        await insert(i)(tx);
      }),
    ),
  );
  for (const o of outcomes) if (o.status === 'rejected') expect(o.reason).toBeInstanceOf(AppError);
  return outcomes.filter((o) => o.status === 'fulfilled').length;
}

const project = (tenantId: string, n: number): ProjectDoc => ({
  id: `prj_${tenantId}_${n}`,
  tenantId,
  name: `p${n}`,
  description: '',
  language: '',
  createdAt: new Date().toISOString(),
  updatedAt: new Date().toISOString(),
});

it('holds PROJECTS_PER_TENANT exactly', async () => {
  const col = store.collection(projects);
  for (let i = 0; i < 3; i++) await col.insert(project('t1', i));
  await col.insert(project('t2', 0));
  const cap = projectCap(store, 5);
  expect(await race(cap, 't1', 50, (i) => (tx) => tx.collection(projects).insert(project('t1', 100 + i)))).toBe(2);
  expect(await col.count({ tenantId: 't1' })).toBe(5);
  await cap.transaction('t1', async (tx, places) => {
    if (await tx.collection(projects).delete('prj_t1_0', { tenantId: 't1' })) await places.free();
  });
  expect(await race(cap, 't1', 10, (i) => (tx) => tx.collection(projects).insert(project('t1', 200 + i)))).toBe(1);
  expect(await cap.used('t1')).toBe(5);
  expect(await cap.used('t2')).toBeNull();
});
