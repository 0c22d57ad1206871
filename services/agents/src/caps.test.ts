import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AppError, openSqliteStore, type Store, type StoreSession, type TenantCap } from '@svc/kit';
import { DEFAULT_CONFIG } from './agent-config';
import { agentCap, agents, type AgentDoc } from './collections';

// AGENTS_PER_TENANT: the counter starts from the data already there (written before counters existed), and creates racing
// for the places left get exactly those; a delete gives one back. On this service's real collection and store.
let dir: string;
let store: Store;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'agents-caps-'));
  store = openSqliteStore({ path: join(dir, 'agents.db') });
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

const agent = (tenantId: string, n: number): AgentDoc => ({
  id: `agt_${tenantId}_${n}`,
  tenantId,
  name: `a${n}`,
  systemPrompt: 'help',
  config: DEFAULT_CONFIG,
  createdAt: new Date().toISOString(),
  updatedAt: new Date().toISOString(),
});

it('holds AGENTS_PER_TENANT exactly', async () => {
  const col = store.collection(agents);
  for (let i = 0; i < 4; i++) await col.insert(agent('t1', i));
  const cap = agentCap(store, 5);
  expect(await race(cap, 't1', 50, (i) => (tx) => tx.collection(agents).insert(agent('t1', 100 + i)))).toBe(1);
  await cap.transaction('t1', async (tx, places) => {
    if (await tx.collection(agents).delete('agt_t1_0', { tenantId: 't1' })) await places.free();
  });
  expect(await race(cap, 't1', 10, (i) => (tx) => tx.collection(agents).insert(agent('t1', 200 + i)))).toBe(1);
  expect(await col.count({ tenantId: 't1' })).toBe(5);
});
