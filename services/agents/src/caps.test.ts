import { raceForPlaces, storePerTest } from '@svc/kit/testing';
import { DEFAULT_CONFIG } from './agent-config';
import { agentCap, agents, type AgentDoc } from './collections';

// AGENTS_PER_TENANT: the counter starts from the data already there (written before counters existed), and creates racing
// for the places left get exactly those; a delete gives one back. On this service's real collection and store.
const storeOf = storePerTest('agents');

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
  const col = storeOf().collection(agents);
  for (let i = 0; i < 4; i++) await col.insert(agent('t1', i));
  const cap = agentCap(storeOf(), 5);
  expect(await raceForPlaces(cap, 't1', 50, (i) => (tx) => tx.collection(agents).insert(agent('t1', 100 + i)))).toBe(1);
  await cap.transaction('t1', async (tx, places) => {
    if (await tx.collection(agents).delete('agt_t1_0', { tenantId: 't1' })) await places.free();
  });
  expect(await raceForPlaces(cap, 't1', 10, (i) => (tx) => tx.collection(agents).insert(agent('t1', 200 + i)))).toBe(1);
  expect(await col.count({ tenantId: 't1' })).toBe(5);
});
