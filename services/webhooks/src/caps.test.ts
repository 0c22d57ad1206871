import { raceForPlaces, storePerTest } from '@svc/kit/testing';
import { webhookCap, webhooks, type WebhookDoc } from './collections';

// WEBHOOKS_PER_TENANT: the counter starts from the data already there (written before counters existed), and creates racing
// for the places left get exactly those; a delete gives one back. On this service's real collection and store.
const storeOf = storePerTest('webhooks');

const hook = (tenantId: string, n: number): WebhookDoc => ({
  id: `whk_${tenantId}_${n}`,
  tenantId,
  url: 'https://example.com/hook',
  events: ['project.created'],
  secretSealed: 'sealed',
  active: true,
  disabledReason: null,
  failingSince: null,
  createdAt: new Date().toISOString(),
  updatedAt: new Date().toISOString(),
});

it("holds WEBHOOKS_PER_TENANT exactly, refusing with the API's 400 too_many_webhooks", async () => {
  const col = storeOf().collection(webhooks);
  for (let i = 0; i < 4; i++) await col.insert(hook('t1', i));
  const cap = webhookCap(storeOf(), 5);
  expect(await raceForPlaces(cap, 't1', 50, (i) => (tx) => tx.collection(webhooks).insert(hook('t1', 100 + i)))).toBe(1);
  await expect(cap.transaction('t1', (_tx, places) => places.take())).rejects.toMatchObject({
    code: 'VALIDATION_ERROR',
    details: { reason: 'too_many_webhooks', limit: 5 },
  });
  await cap.transaction('t1', async (tx, places) => {
    if (await tx.collection(webhooks).delete('whk_t1_0', { tenantId: 't1' })) await places.free();
  });
  expect(await raceForPlaces(cap, 't1', 10, (i) => (tx) => tx.collection(webhooks).insert(hook('t1', 200 + i)))).toBe(1);
  expect(await col.count({ tenantId: 't1' })).toBe(5);
});
