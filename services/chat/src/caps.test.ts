import { raceForPlaces, storePerTest } from '@svc/kit/testing';
import { sessionCap, sessions, type SessionDoc } from './collections';

// CHAT_SESSIONS_PER_TENANT: the counter starts from the data already there (written before counters existed), and creates racing
// for the places left get exactly those; a delete gives one back. On this service's real collection and store.
const storeOf = storePerTest('chat');

const session = (tenantId: string, n: number): SessionDoc => ({
  id: `chs_${tenantId}_${n}`,
  tenantId,
  projectId: '',
  agentId: '',
  title: `s${n}`,
  createdAt: new Date().toISOString(),
});

it('holds CHAT_SESSIONS_PER_TENANT exactly', async () => {
  const col = storeOf().collection(sessions);
  for (let i = 0; i < 2; i++) await col.insert(session('t1', i));
  const cap = sessionCap(storeOf(), 5);
  expect(await raceForPlaces(cap, 't1', 50, (i) => (tx) => tx.collection(sessions).insert(session('t1', 100 + i)))).toBe(3);
  await cap.transaction('t1', async (tx, places) => {
    if (await tx.collection(sessions).delete('chs_t1_0', { tenantId: 't1' })) await places.free();
  });
  expect(await raceForPlaces(cap, 't1', 10, (i) => (tx) => tx.collection(sessions).insert(session('t1', 200 + i)))).toBe(1);
  expect(await col.count({ tenantId: 't1' })).toBe(5);
});
