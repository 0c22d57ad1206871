import { randomBytes, scrypt as scryptCb, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import { HashGate } from './login-guard';

/**
 * Every scrypt of the process goes through one gate (PASSWORD_HASH_CONCURRENCY / PASSWORD_HASH_QUEUE, set at start by
 * `configurePasswordHashing`): half of libuv's four threads at most, so JWT signing and verification never wait.
 */
let gate = new HashGate(2, 64);

export interface PasswordHashing {
  concurrency: number;
  queue: number;
  perAddressQueue: number;
  maxWaitMs: number;
  /** log2 of scrypt's N for new hashes (PASSWORD_HASH_COST). */
  cost: number;
}

export function configurePasswordHashing(s: PasswordHashing): void {
  gate = new HashGate(s.concurrency, s.queue, s.perAddressQueue, s.maxWaitMs);
  PARAMS.N = 2 ** s.cost;
  dummyHash = null;
}

// scrypt with N=2^15, r=8, p=1 (OWASP's floor): tens of milliseconds per guess, run on libuv's thread pool. New
// hashes use N=2^PASSWORD_HASH_COST; each stored hash names its own N, r and p, so a change of cost keeps every
// password valid. Test systems lower it: a sign-up is then a few milliseconds of CPU, not about 120.
const PARAMS = { N: 2 ** 15, r: 8, p: 1, maxmem: 64 * 1024 * 1024 };
const KEYLEN = 32;

/** `address`: whose turn it is in the gate (the client address; '' for work of no one client). */
function scrypt(password: string, salt: Buffer, options: ScryptOptions, address = ''): Promise<Buffer> {
  return gate.run(
    address,
    () =>
      new Promise<Buffer>((resolve, reject) =>
        scryptCb(password.normalize('NFKC'), salt, KEYLEN, options, (err, key) => (err ? reject(err) : resolve(key))),
      ),
  );
}

export async function hashPassword(password: string, address = ''): Promise<string> {
  const salt = randomBytes(16);
  const key = await scrypt(password, salt, PARAMS, address);
  return ['scrypt', PARAMS.N, PARAMS.r, PARAMS.p, salt.toString('base64'), key.toString('base64')].join('$');
}

export async function verifyPassword(password: string, stored: string, address = ''): Promise<boolean> {
  const [alg, n, r, p, salt, hash] = stored.split('$');
  if (alg !== 'scrypt') return false;
  const expected = Buffer.from(hash, 'base64');
  const key = await scrypt(
    password,
    Buffer.from(salt, 'base64'),
    { N: Number(n), r: Number(r), p: Number(p), maxmem: PARAMS.maxmem },
    address,
  );
  return key.length === expected.length && timingSafeEqual(key, expected);
}

/** Spends the same time as a real check, so unknown emails cannot be told apart by latency. */
let dummyHash: Promise<string> | null = null;
export async function burnPasswordCheck(password: string, address = ''): Promise<void> {
  dummyHash ??= hashPassword('not-a-real-password');
  await verifyPassword(password, await dummyHash, address);
}
