import { raceForPlaces, storePerTest } from '@svc/kit/testing';
import { projectCap, projects, type ProjectDoc } from './collections';

// PROJECTS_PER_TENANT: the counter starts from the data already there (written before counters existed), and creates racing
// for the places left get exactly those; a delete gives one back. On this service's real collection and store.
const storeOf = storePerTest('projects');

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
  const col = storeOf().collection(projects);
  for (let i = 0; i < 3; i++) await col.insert(project('t1', i));
  await col.insert(project('t2', 0));
  const cap = projectCap(storeOf(), 5);
  expect(await raceForPlaces(cap, 't1', 50, (i) => (tx) => tx.collection(projects).insert(project('t1', 100 + i)))).toBe(2);
  expect(await col.count({ tenantId: 't1' })).toBe(5);
  await cap.transaction('t1', async (tx, places) => {
    if (await tx.collection(projects).delete('prj_t1_0', { tenantId: 't1' })) await places.free();
  });
  expect(await raceForPlaces(cap, 't1', 10, (i) => (tx) => tx.collection(projects).insert(project('t1', 200 + i)))).toBe(1);
  expect(await cap.used('t1')).toBe(5);
  expect(await cap.used('t2')).toBeNull();
});
