import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openSqliteStore, type CallContext, type Store } from '@svc/kit';
import { cliLogins } from './collections';
import type { IdentityDeps } from './context';
import { CLI_LOGIN_TTL_MS, cliLoginHandlers } from './handlers/cli-login';

// Expiry with an injected clock (no waiting): 10 minutes after start a login is expired, whatever else happened.
let dir: string;
let store: Store;
let clock = 0;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'cli-login-'));
  store = await openSqliteStore({ path: join(dir, 'identity.db') });
  await store.ensure(cliLogins);
  clock = Date.parse('2026-11-24T00:00:00Z');
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const handlers = () => cliLoginHandlers({ store, audit: { kick: () => undefined } } as unknown as IdentityDeps, () => clock);
const userCtx = { auth: { sub: 'usr_1', tid: 'ten_1', typ: 'user', sid: 'ses_1' }, token: 't' } as unknown as CallContext;

async function started() {
  const state = randomBytes(32).toString('hex');
  const verifier = randomBytes(32).toString('base64url');
  const res = await handlers().startCliLogin({
    state,
    codeChallenge: createHash('sha256').update(verifier).digest('base64url'),
    codeChallengeMethod: 'S256',
    cliVersion: '1',
    platform: 'test',
  });
  return { ...res, state, verifier };
}

it('is pending until 10 minutes after start, then expired: approve and exchange are refused', async () => {
  const login = await started();
  clock += CLI_LOGIN_TTL_MS - 1;
  expect((await handlers().getCliLogin({ loginId: login.loginId })).status).toBe('pending');
  clock += 1;
  expect((await handlers().getCliLogin({ loginId: login.loginId })).status).toBe('expired');
  await expect(handlers().decideCliLogin({ loginId: login.loginId, state: login.state, approve: true }, userCtx)).rejects.toMatchObject({
    code: 'CONFLICT',
  });
  await expect(handlers().exchangeCliLogin({ loginId: login.loginId, codeVerifier: login.verifier })).rejects.toMatchObject({
    code: 'CONFLICT',
  });
});

it('expires an approved login that was not exchanged in time', async () => {
  const login = await started();
  await handlers().decideCliLogin({ loginId: login.loginId, state: login.state, approve: true }, userCtx);
  clock += CLI_LOGIN_TTL_MS;
  expect((await handlers().getCliLogin({ loginId: login.loginId })).status).toBe('expired');
  await expect(handlers().exchangeCliLogin({ loginId: login.loginId, codeVerifier: login.verifier })).rejects.toMatchObject({
    code: 'CONFLICT',
  });
});

it('answers a status poll with a read only: polling writes nothing', async () => {
  const login = await started();
  const before = JSON.stringify(await store.collection(cliLogins).get(login.loginId));
  for (let i = 0; i < 20; i++) await handlers().getCliLogin({ loginId: login.loginId });
  expect(JSON.stringify(await store.collection(cliLogins).get(login.loginId))).toBe(before);
});
