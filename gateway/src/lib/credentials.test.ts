import { randomUUID } from 'node:crypto';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { AppError, createLogger, JwtVerifier } from '@svc/kit';
import type { identityV1 } from '@svc/proto';
import { CredentialResolver } from './credentials';
import type { FetchFeed } from './feed-follower';
import { RevocationWatcher } from './revocations';

// The resolver with real ES256 tokens and a real RevocationWatcher. The watcher's fetch stands in for identity's
// ListRevocations; `authenticate` for identity's Authenticate (which checks an opaque credential in its store).

const ISSUER = 'test-issuer';
const AUDIENCE = 'test-audience';
const logger = createLogger('test', 'silent');
const watchers: RevocationWatcher[] = [];
afterEach(() => {
  for (const w of watchers.splice(0)) w.stop();
});

let sign: (sid: string) => Promise<string>;
let verifier: () => JwtVerifier;
beforeAll(async () => {
  const { publicKey, privateKey } = await generateKeyPair('ES256');
  const jwk = { ...(await exportJWK(publicKey)), kid: 'k1', alg: 'ES256' };
  sign = (sid) =>
    new SignJWT({ tid: 't1', typ: 'user', role: 'owner', sid, ims: Date.now() })
      .setProtectedHeader({ alg: 'ES256', kid: 'k1' })
      .setIssuer(ISSUER)
      .setAudience(AUDIENCE)
      .setSubject('u1')
      .setJti(randomUUID())
      .setIssuedAt()
      .setExpirationTime('10m')
      .sign(privateKey);
  verifier = () => new JwtVerifier({ issuer: ISSUER, audience: AUDIENCE, fetchJwks: async () => ({ keys: [jwk] }) });
});

type Entry = Awaited<ReturnType<FetchFeed>>['entries'][number];

/** Identity's feed, in memory; `down` makes ListRevocations fail, `slow` holds its answers until released. */
function identityFeed() {
  const entries: Entry[] = [];
  const state = { down: false, slow: null as Promise<void> | null };
  const fetch: FetchFeed = async (afterSeq) => {
    if (state.slow) await state.slow;
    if (state.down) throw new Error('identity unreachable');
    const after = entries.filter((e) => e.seq > afterSeq);
    return { entries: after, lastSeq: after.length ? after[after.length - 1].seq : afterSeq };
  };
  return {
    state,
    fetch,
    revoke: (kind: string, subjectId: string) => entries.push({ seq: entries.length + 1, kind, subjectId, at: Date.now() }),
  };
}

function resolverFor(
  feed: ReturnType<typeof identityFeed>,
  authenticate = async (_c: string): Promise<identityV1.AuthenticateResponse> => {
    throw new AppError('UNAUTHORIZED', 'Credential is not valid');
  },
) {
  const watcher = new RevocationWatcher(feed.fetch, { pollMs: 50, logger });
  watchers.push(watcher);
  const resolver = new CredentialResolver(authenticate, verifier(), watcher, 300);
  watcher.start();
  return { watcher, resolver };
}

const codeOf = (p: Promise<unknown>) =>
  p.then(
    () => 'accepted',
    (err: AppError) => err.code,
  );

async function until(check: () => boolean): Promise<void> {
  for (let i = 0; !check(); i++) {
    if (i > 200) throw new Error('condition not met within 2 s');
    await new Promise((r) => setTimeout(r, 10));
  }
}

it('refuses a revoked token from the first request on: before the first read of the feed lands, the token waits for it', async () => {
  const feed = identityFeed();
  feed.revoke('session', 'ses_revoked');
  let land!: () => void;
  feed.state.slow = new Promise<void>((resolve) => (land = resolve));
  const { resolver } = resolverFor(feed);
  const token = await sign('ses_revoked');

  const answer = codeOf(resolver.fromJwt(token));
  await new Promise((r) => setTimeout(r, 100));
  feed.state.slow = null;
  land();
  expect(await answer).toBe('UNAUTHORIZED');
});

it('refuses bearer tokens with 503 while the feed cannot be read, and accepts them again once it is', async () => {
  const feed = identityFeed();
  feed.state.down = true;
  const { watcher, resolver } = resolverFor(feed);
  const token = await sign('ses_live');
  expect(await codeOf(resolver.fromJwt(token))).toBe('SERVICE_UNAVAILABLE');

  feed.state.down = false;
  await until(() => watcher.current);
  expect(await codeOf(resolver.fromJwt(token))).toBe('accepted');
  expect(resolver.cached(token, 'jwt')?.sessionId).toBe('ses_live');

  // Identity becomes unreachable: a token seen before is no longer answered from memory either.
  feed.state.down = true;
  await watcher.poll();
  expect(resolver.cached(token, 'jwt')).toBeUndefined();
  expect(await codeOf(resolver.fromJwt(token))).toBe('SERVICE_UNAVAILABLE');
});

it('asks identity again for a cached API key while the feed is not current (the key may have been revoked meanwhile)', async () => {
  const feed = identityFeed();
  let keyLive = true;
  const authenticate = async (): Promise<identityV1.AuthenticateResponse> => {
    if (!keyLive) throw new AppError('UNAUTHORIZED', 'API key is not valid');
    const principal = {
      tenantId: 't1',
      userId: 'u1',
      type: 'api_key',
      credentialId: 'key_1',
      sessionId: 'key_1',
      role: 'owner',
      scopes: [],
      scoped: false,
      environment: 'development',
      ipAllowlist: [],
      serviceToken: 'minted',
      serviceTokenExpiresAt: Date.now() + 600_000,
      emailUnverified: false,
    };
    return { principal };
  };
  const { watcher, resolver } = resolverFor(feed, authenticate);
  await until(() => watcher.current);
  const key = 'sk_test_0123456789abcdefghij';
  expect((await resolver.fromOpaque(key, 'api_key')).credentialId).toBe('key_1');
  expect(resolver.cached(key, 'api_key')?.credentialId).toBe('key_1');

  // Revoked in identity's store; its feed entry cannot be read by this gateway.
  keyLive = false;
  feed.state.down = true;
  feed.revoke('api_key', 'key_1');
  await watcher.poll();
  expect(resolver.cached(key, 'api_key')).toBeUndefined();
  expect(await codeOf(resolver.fromOpaque(key, 'api_key'))).toBe('UNAUTHORIZED');
});
