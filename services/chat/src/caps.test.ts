import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AppError, openSqliteStore, type Store, type StoreSession, type TenantCap } from '@svc/kit';
import { sessionCap, sessions, type SessionDoc } from './collections';

// CHAT_SESSIONS_PER_TENANT: the counter starts from the data already there (written before counters existed), and creates racing
// for the places left get exactly those; a delete gives one back. On this service's real collection and store.
let dir: string;
let store: Store;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'chat-caps-'));
  store = openSqliteStore({ path: join(dir, 'chat.db') });
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

const session = (tenantId: string, n: number): SessionDoc => ({
  id: `chs_${tenantId}_${n}`,
  tenantId,
  projectId: '',
  agentId: '',
  title: `s${n}`,
  createdAt: new Date().toISOString(),
});

it('holds CHAT_SESSIONS_PER_TENANT exactly', async () => {
  const col = store.collection(sessions);
  for (let i = 0; i < 2; i++) await col.insert(session('t1', i));
  const cap = sessionCap(store, 5);
  expect(await race(cap, 't1', 50, (i) => (tx) => tx.collection(sessions).insert(session('t1', 100 + i)))).toBe(3);
  await cap.transaction('t1', async (tx, places) => {
    if (await tx.collection(sessions).delete('chs_t1_0', { tenantId: 't1' })) await places.free();
  });
  expect(await race(cap, 't1', 10, (i) => (tx) => tx.collection(sessions).insert(session('t1', 200 + i)))).toBe(1);
  expect(await col.count({ tenantId: 't1' })).toBe(5);
});
