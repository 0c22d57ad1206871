import { createHash, randomBytes } from 'node:crypto';
import { startGateway } from '@svc/gateway';
import { createClient, type ServiceClient } from '@svc/kit';
import { identityV1 } from '@svc/proto';
import { client, eventually, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// Issue 19, 2a: one tenant logs a burst of sessions out (more feed entries than a page, within seconds). Every
// gateway must still read every revocation of the burst and the ones after it, and a gateway started after the
// burst must read to the feed's end before its first answer. The old follower re-read a 5 s window and stopped at
// a page with nothing new in it: after such a burst no revocation was enforced by any gateway.
//
// The sessions are made and the burst is logged out through identity's gRPC API (what the gateway's CLI login and
// logout routes call; the stack runs in this one process, and over HTTP the burst took up to 8 s on a loaded
// machine, too slow to put a page of entries inside 5 s). What is under test, the gateways' refusals, goes over HTTP.
jest.setTimeout(120_000);

/**
 * The gateways read the feed in pages of PAGE (FEED_PAGE_SIZE; the default, 1000, is the service's largest): the
 * burst is two and a half pages, and what is under test, reading past a full page, is the same at any size.
 */
const PAGE = 40;
const BURST = 100;
let stack: Stack;
let gateways: Client[];
let owner: Account;
let identity: ServiceClient<typeof identityV1.IdentityServiceService>;
/** CLI sessions of the owner: BURST logged out at once, then one more. */
let tokens: string[];

/** Runs `work` for 0..count-1, `concurrency` at a time; the results in order. */
async function inParallel<T>(count: number, concurrency: number, work: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(count);
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) {
        const i = next++;
        out[i] = await work(i);
      }
    }),
  );
  return out;
}

/**
 * A new session of the owner, through the CLI login (start, approve, exchange): a session as real as a password
 * sign-in, without its scrypt (a password sign-in costs some 70 ms of scrypt).
 */
async function cliSession(): Promise<string> {
  const verifier = randomBytes(32).toString('base64url');
  const state = randomBytes(32).toString('hex');
  const codeChallenge = createHash('sha256').update(verifier).digest('base64url');
  const { loginId } = await identity.startCliLogin({
    state,
    codeChallenge,
    codeChallengeMethod: 'S256',
    cliVersion: '1',
    platform: 'test',
  });
  await identity.decideCliLogin({ loginId, state, approve: true }, { token: owner.accessToken });
  return (await identity.exchangeCliLogin({ loginId, codeVerifier: verifier })).tokens!.accessToken;
}

/** The status a gateway answers GET /tenant with for a token (a read the gateway decides alone). */
const statusOf = async (gateway: Client, token: string) => (await gateway.get('/api/v1/tenant', { token })).status;

/** The tokens (by index) that some gateway still accepts. */
async function accepted(indexes: number[]): Promise<string[]> {
  const answers = await inParallel(indexes.length * gateways.length, 32, async (n) => {
    const g = n % gateways.length;
    const i = indexes[Math.floor(n / gateways.length)];
    const status = await statusOf(gateways[g], tokens[i]);
    return status === 401 ? null : `token ${i} on gateway ${g}: ${status}`;
  });
  return answers.filter((a): a is string => a !== null);
}

beforeAll(async () => {
  // Thousands of requests of one user: no rate limit in their way.
  stack = await startStack({ gateways: 2, env: { RATE_LIMIT_MAX: '10000000', FEED_PAGE_SIZE: String(PAGE) } });
  gateways = stack.gateways.map((g) => client(g.url));
  identity = createClient(identityV1.IdentityServiceService, stack.env.IDENTITY_ADDR!, { deadlineMs: 30_000 });
  owner = await signUp(gateways[0], 'Burst');
  const started = Date.now();
  tokens = await inParallel(BURST + 1, 16, () => cliSession());
  console.info(`${BURST + 1} sessions made in ${Date.now() - started} ms`);
});
afterAll(async () => {
  identity?.close();
  await stack?.stop();
});

it('refuses, on every gateway, the session logged out after a burst of logouts longer than a feed page, and every session of the burst', async () => {
  // Known to both gateways before the burst (their verified tokens are remembered).
  expect(await inParallel(20, 8, (i) => statusOf(gateways[i % 2], tokens[i * 5]))).toEqual(new Array(20).fill(200));

  const started = Date.now();
  await inParallel(BURST, 32, (i) => identity.logout({}, { token: tokens[i] }));
  console.info(`${BURST} logouts in ${Date.now() - started} ms`);

  // One more, as a user logs out: through a gateway.
  const last = tokens[BURST];
  expect((await gateways[1].post('/api/v1/auth/logout', undefined, { token: last })).status).toBe(200);
  const refusedAfter = await Promise.all(gateways.map((g) => eventually(async () => (await statusOf(g, last)) === 401, 1000, 10)));
  console.info(`the next logout refused after ${refusedAfter.join(' and ')} ms`);

  expect(await accepted(Array.from({ length: BURST }, (_, i) => i))).toEqual([]);
  // Refusals are the revocations', not the gateways' refusing everything.
  for (const g of gateways) expect(await statusOf(g, owner.accessToken)).toBe(200);
});

it('refuses a revoked token on the very first request to a gateway started after the burst', async () => {
  await stack.gateways[1].stop();
  const restarted = await startGateway({ ...stack.env, INSTANCE_ID: 'gw-restarted' });
  stack.gateways[1] = restarted;
  gateways[1] = client(restarted.url);

  // First request: the session logged out last, past the burst in the feed.
  expect(await statusOf(gateways[1], tokens[BURST])).toBe(401);
  expect(await accepted(Array.from({ length: 50 }, (_, i) => i * 2))).toEqual([]);
  expect(await statusOf(gateways[1], owner.accessToken)).toBe(200);
});
