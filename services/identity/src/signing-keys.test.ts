import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalJWKSet, decodeProtectedHeader, exportJWK, generateKeyPair, jwtVerify } from 'jose';
import { JWT_ALG, openSqliteStore, SecretBox, type Store } from '@svc/kit';
import { signingKeys } from './collections';
import { SigningKeys } from './signing-keys';

// Identity replicas share their signing keys through the store: each replica is a SigningKeys on its own
// connection to one database file, as two processes would be.
const box = new SecretBox([{ id: 'k1', key: randomBytes(32) }]);
const options = { issuer: 'iss', audience: 'aud', ttlSeconds: 300 };
let dir: string;
let stores: Store[] = [];

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'svc-signing-keys-'));
});
afterEach(async () => {
  await Promise.all(stores.map((s) => s.close()));
  stores = [];
  rmSync(dir, { recursive: true, force: true });
});

function replica(now?: () => number): SigningKeys {
  const store = openSqliteStore({ path: join(dir, 'identity.db') });
  stores.push(store);
  return new SigningKeys(store, box, now);
}

const sign = (keys: SigningKeys) => keys.sign({ sub: 'usr_1' }, { ...options, jti: `jti_${Math.random()}` });

/** Two loaded replicas: `a` on the real clock, `b` on one the test moves (`clock.now`), so b looks for keys when told. */
async function twoReplicas() {
  const clock = { now: 0 };
  const a = replica();
  const b = replica(() => clock.now);
  await a.load();
  await b.load();
  return { a, b, clock };
}
const kidOf = (token: string) => decodeProtectedHeader(token).kid;
const verifies = async (token: string, by: SigningKeys) =>
  jwtVerify(token, createLocalJWKSet(await by.getJwks()), { issuer: 'iss', audience: 'aud' }).then(
    () => true,
    () => false,
  );

it('replicas starting at once on an empty store sign with one key, which each of them publishes', async () => {
  const replicas = [replica(), replica(), replica()];
  await Promise.all(replicas.map((r) => r.load()));
  const tokens = await Promise.all(replicas.map(sign));
  expect(new Set(tokens.map(kidOf)).size).toBe(1);
  expect(await stores[0].collection(signingKeys).count({})).toBe(1);
  for (const t of tokens) for (const r of replicas) expect(await verifies(t, r)).toBe(true);
});

it('a rotation is published by every replica at once; the others follow it, and older tokens stay valid', async () => {
  const { a, b, clock } = await twoReplicas();
  const before = await sign(b);
  const kid = await a.rotate();
  const after = await sign(a);
  expect(kidOf(after)).toBe(kid);
  // b has not looked yet: it still signs with the previous key, which stays published; b publishes the new one.
  expect(kidOf(await sign(b))).toBe(kidOf(before));
  expect(await verifies(after, b)).toBe(true);
  expect(await verifies(before, a)).toBe(true);
  clock.now += 10_000;
  expect(kidOf(await sign(b))).toBe(kid);
});

it('signing inside a transaction looks for a newer key through its session', async () => {
  // A store-level read there would not join the transaction (on SQLite it would wait for it): the session is passed.
  const { a, b, clock } = await twoReplicas();
  const kid = await a.rotate();
  clock.now += 10_000;
  const token = await stores[1].transaction((tx) => b.sign({ sub: 'usr_1' }, { ...options, jti: 'jti_tx' }, tx));
  expect(kidOf(token)).toBe(kid);
});

it('replicas rotating at once agree on the next key', async () => {
  const replicas = [replica(), replica()];
  await Promise.all(replicas.map((r) => r.load()));
  const kids = await Promise.all(replicas.map((r) => r.rotate()));
  expect(kids[0]).toBe(kids[1]);
  expect(await stores[0].collection(signingKeys).count({})).toBe(2);
  expect(new Set((await Promise.all(replicas.map(sign))).map(kidOf))).toEqual(new Set([kids[0]]));
});

it('keeps publishing the keys an older version made, and signs with one shared key from now on', async () => {
  const store = openSqliteStore({ path: join(dir, 'identity.db') });
  stores.push(store);
  // An older version's key: no generation (each replica made its own when it found none).
  const { privateKey, publicKey } = await generateKeyPair(JWT_ALG, { extractable: true });
  const old = {
    id: 'key_legacy',
    privateJwk: box.encrypt(JSON.stringify(await exportJWK(privateKey))),
    publicJwk: JSON.stringify({ ...(await exportJWK(publicKey)), kid: 'key_legacy', alg: JWT_ALG, use: 'sig' }),
    status: 'active' as const,
    createdAt: new Date().toISOString(),
  };
  await store.collection(signingKeys).insert(old);
  const a = replica();
  const b = replica();
  await Promise.all([a.load(), b.load()]);
  const tokens = [await sign(a), await sign(b)];
  expect(kidOf(tokens[0])).toBe(kidOf(tokens[1]));
  expect(kidOf(tokens[0])).not.toBe(old.id);
  expect((await a.getJwks()).keys.map((k) => k.kid)).toEqual([kidOf(tokens[0]), old.id]);
});
