import { raceForPlaces, storePerTest } from '@svc/kit/testing';
import { identityCaps } from './caps';
import { apiKeys, secrets, users, type ApiKeyDoc, type SecretDoc, type UserDoc } from './collections';
import type { IdentitySettings } from './context';

// MEMBERS_PER_TENANT, API_KEYS_PER_TENANT (live keys) and SECRETS_PER_TENANT: the counter starts from the data
// already there (written before counters existed), and creates racing for the places left get exactly those; a
// delete gives one back. On this service's real collections and store.
const storeOf = storePerTest('identity');

const now = () => new Date().toISOString();
const settings = { maxMembersPerTenant: 5, maxApiKeysPerTenant: 5, maxSecretsPerTenant: 5 } as IdentitySettings;
const user = (tenantId: string, n: number): UserDoc => ({
  id: `usr_${tenantId}_${n}`,
  tenantId,
  email: `${tenantId}-${n}@example.com`,
  name: 'U',
  role: 'member',
  passwordHash: 'x',
  disabled: false,
  createdAt: now(),
  updatedAt: now(),
});
const key = (tenantId: string, n: number, revoked = false): ApiKeyDoc => ({
  id: `key_${tenantId}_${n}`,
  tenantId,
  createdBy: 'usr_1',
  name: 'k',
  type: 'sdk',
  environment: 'development',
  scopes: [],
  scoped: false,
  start: 'sk_',
  hash: `hash_${tenantId}_${n}`,
  createdAt: now(),
  lastUsedAt: null,
  expiresAt: null,
  revokedAt: revoked ? now() : null,
});
const secret = (tenantId: string, n: number): SecretDoc => ({
  id: `sec_${tenantId}_${n}`,
  tenantId,
  name: `S${n}`,
  description: '',
  version: 1,
  valueSealed: 'sealed',
  createdAt: now(),
  updatedAt: now(),
});

it('holds MEMBERS_PER_TENANT exactly; removing a member frees a place', async () => {
  const { members } = identityCaps(storeOf(), settings);
  for (let i = 0; i < 2; i++) await storeOf().collection(users).insert(user('t1', i));
  expect(await raceForPlaces(members, 't1', 50, (i) => (tx) => tx.collection(users).insert(user('t1', 100 + i)))).toBe(3);
  await members.transaction('t1', async (tx, places) => {
    if (await tx.collection(users).delete('usr_t1_0', { tenantId: 't1' })) await places.free();
  });
  expect(await raceForPlaces(members, 't1', 10, (i) => (tx) => tx.collection(users).insert(user('t1', 200 + i)))).toBe(1);
  expect(await storeOf().collection(users).count({ tenantId: 't1' })).toBe(5);
});

it('holds API_KEYS_PER_TENANT exactly on live keys: revoked ones do not count, a revoke frees a place', async () => {
  const { apiKeys: cap } = identityCaps(storeOf(), settings);
  const col = storeOf().collection(apiKeys);
  for (let i = 0; i < 2; i++) await col.insert(key('t1', i));
  for (let i = 2; i < 5; i++) await col.insert(key('t1', i, true));
  expect(await raceForPlaces(cap, 't1', 50, (i) => (tx) => tx.collection(apiKeys).insert(key('t1', 100 + i)))).toBe(3);
  await cap.transaction('t1', async (tx, places) => {
    if (await tx.collection(apiKeys).update('key_t1_0', { tenantId: 't1', revokedAt: null }, { revokedAt: now() })) await places.free();
  });
  expect(await raceForPlaces(cap, 't1', 10, (i) => (tx) => tx.collection(apiKeys).insert(key('t1', 200 + i)))).toBe(1);
  expect(await col.count({ tenantId: 't1', revokedAt: null })).toBe(5);
});

it('holds SECRETS_PER_TENANT exactly; a delete frees a place', async () => {
  const { secrets: cap } = identityCaps(storeOf(), settings);
  for (let i = 0; i < 4; i++) await storeOf().collection(secrets).insert(secret('t1', i));
  expect(await raceForPlaces(cap, 't1', 50, (i) => (tx) => tx.collection(secrets).insert(secret('t1', 100 + i)))).toBe(1);
  await cap.transaction('t1', async (tx, places) => {
    if (await tx.collection(secrets).delete('sec_t1_0', { tenantId: 't1' })) await places.free();
  });
  expect(await raceForPlaces(cap, 't1', 10, (i) => (tx) => tx.collection(secrets).insert(secret('t1', 200 + i)))).toBe(1);
  expect(await storeOf().collection(secrets).count({ tenantId: 't1' })).toBe(5);
});
