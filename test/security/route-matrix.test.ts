import { decodeJwt, generateKeyPair, SignJWT, type JWTPayload } from 'jose';
import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';
import { realSigningKey } from '../helpers/tokens';

// Every operation of the OpenAPI document against the policy it declares (x-access), with every kind of caller that
// policy must refuse: no credential, a forged one, a key scoped elsewhere, a key with any scope list where none is
// allowed, a member where owners and admins are needed, an API key where a person is needed, and for the operator
// API a wrong token and a tenant's credential. Then the credentials that were once good or look good (CONTRACT.md 3):
// an expired access token, `alg: none`, an unknown kid and a foreign key (each with a real user's claims), a revoked
// API key, and a live key used from outside its tenant's IP allowlist. Refusals come before validation, so no body
// is sent. An operation without a known x-access policy fails the suite.
jest.setTimeout(180_000);

const ADMIN = 'operator-token-for-the-route-matrix-0123';
let stack: Stack;
let api: Client;
let owner: Account;
let member: Account;
let ownerKey: string;
const keyScopedTo: Record<string, string> = {};
/** Credentials that look right but must be refused everywhere (see beforeAll). */
const bad = { expired: '', algNone: '', unknownKid: '', foreignKey: '', revokedKey: '', outsideAllowlistKey: '' };

interface Op {
  method: string;
  path: string;
  access: string | undefined;
}
let ops: Op[] = [];
const totals = { operations: 0, covered: 0, publicOps: 0, cases: 0, admitted: 0 };

const now = () => Math.floor(Date.now() / 1000);
const b64 = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');

beforeAll(async () => {
  stack = await startStack({ env: { SVC_ADMIN_TOKEN: ADMIN, RATE_LIMIT_MAX: '1000000' } });
  api = client(stack.url);
  owner = await signUp(api, 'Matrix');
  const email = `member-${Date.now()}@example.com`;
  await api.post(
    '/api/v1/tenant/team/members',
    { email, name: 'M', role: 'member', password: 'member password 1' },
    { token: owner.accessToken },
  );
  const login = (await api.post('/api/v1/auth/login', { email, password: 'member password 1' })).body.data;
  member = { ...owner, email, accessToken: login.accessToken, userId: login.user.id };
  ownerKey = (await createKey(api, owner.accessToken)).key;
  for (const scope of ['projects:read', 'agents:read', 'secrets:read', 'billing:read', 'events:read', 'llm:use'])
    keyScopedTo[scope] = (await createKey(api, owner.accessToken, { scopes: [scope] })).key;

  // Tokens carrying the owner's real claims (so only the one named flaw can be why they are refused).
  const real = await realSigningKey(stack.dataDir);
  const claims = decodeJwt(owner.accessToken);
  const fresh = (): JWTPayload => ({ ...claims, iat: now() - 5, exp: now() + 600, jti: `m${Math.random()}` });
  expect((await api.get('/api/v1/auth/me', { token: await real.sign(fresh()) })).status).toBe(200); // the control
  bad.expired = await real.sign({ ...fresh(), iat: now() - 1000, exp: now() - 60 });
  bad.algNone = `${b64({ alg: 'none', typ: 'JWT', kid: real.kid })}.${b64(fresh())}.`;
  bad.unknownKid = await real.sign(fresh(), { kid: `${real.kid}-unknown` });
  const { privateKey } = await generateKeyPair('ES256');
  bad.foreignKey = await new SignJWT(fresh()).setProtectedHeader({ alg: 'ES256', typ: 'JWT', kid: real.kid }).sign(privateKey);

  // A key that worked, then revoked: refused by the gateway within a second (CONTRACT.md 3).
  const revoked = await createKey(api, owner.accessToken);
  expect((await api.get('/api/v1/auth/me', { token: revoked.key })).status).toBe(200);
  expect((await api.del(`/api/v1/api-keys/${revoked.id}`, { token: owner.accessToken })).status).toBe(200);
  await eventually(async () => (await api.get('/api/v1/auth/me', { token: revoked.key })).status === 401, 3000);
  bad.revokedKey = revoked.key;

  // Another tenant whose allowlist leaves out loopback, where every request of this suite comes from.
  const fenced = await signUp(api, 'Fenced');
  const fencedKey = (await createKey(api, fenced.accessToken)).key;
  expect((await api.get('/api/v1/auth/me', { token: fencedKey })).status).toBe(200);
  const fence = await api.put(
    '/api/v1/tenant/security/network',
    { ipAllowlist: ['10.0.0.0/8', '2001:db8::/32'] },
    { token: fenced.accessToken },
  );
  expect(fence.status).toBe(200);
  await eventually(async () => (await api.get('/api/v1/auth/me', { token: fencedKey })).status === 403, 3000);
  bad.outsideAllowlistKey = fencedKey;

  const doc = (await api.get('/api/v1/openapi.json')).body;
  ops = Object.entries(doc.paths as Record<string, Record<string, { 'x-access'?: string }>>).flatMap(([path, methods]) =>
    Object.entries(methods).map(([method, o]) => ({
      method: method.toUpperCase(),
      path: path.replace(/\{(\w+)\}/g, 'xx_none'),
      access: o['x-access'],
    })),
  );
  totals.operations = ops.length;
});
afterAll(async () => {
  // For the closing note: how much of the API the matrix walked.
  console.log(
    `route matrix: ${totals.covered}/${totals.operations} operations refused callers by policy (${totals.publicOps} public), ` +
      `${totals.cases} refusal cases, ${totals.admitted} admitted reads`,
  );
  await stack.stop();
});

type Refusal = [caller: string, token: string | undefined, status: 401 | 403, reason?: string];

const POLICIES = [
  'public',
  'operator',
  'authenticated',
  'projects:read',
  'projects:write',
  'agents:read',
  'agents:write',
  'secrets:read',
  'secrets:write',
  'billing:read',
  'billing:write',
  'billing:read:manager',
  'events:read',
  'audit:read',
  'unscoped',
  'manager',
  'sessionManager',
  'llm:use',
];

/** The callers each policy must refuse, and how. An operation with no policy, or one unknown here, is an error. */
function refusals(op: Op): Refusal[] {
  if (!op.access || !POLICIES.includes(op.access))
    throw new Error(`${op.method} ${op.path} declares no known x-access policy (${String(op.access)})`);
  if (op.access === 'public') return [];
  // Never a valid credential: the same 401 wherever one is needed, the operator API included.
  const invalid: Refusal[] = [
    ['an expired access token', bad.expired, 401],
    ['an alg:none token', bad.algNone, 401],
    ['a token with an unknown kid', bad.unknownKid, 401],
    ['a token signed by another key', bad.foreignKey, 401],
    ['a revoked API key', bad.revokedKey, 401],
  ];
  if (op.access === 'operator')
    return [
      ['no credential', undefined, 401],
      ['a wrong operator token', 'not-the-operator-token-at-all-0000', 401],
      ...invalid,
      ["a tenant owner's session", owner.accessToken, 403],
      ["a tenant owner's API key", ownerKey, 403],
      // A tenant's key stays a tenant's key wherever it comes from: not the operator's.
      ['a key from outside its allowlist', bad.outsideAllowlistKey, 403],
    ];
  const out: Refusal[] = [
    ['no credential', undefined, 401],
    ['a forged token', 'eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.', 401],
    ['an unknown API key', `svc_sdk_${'x'.repeat(43)}`, 401],
    ...invalid,
    // The allowlist is checked before the route's policy: the same answer on every route a key may call.
    ['a key from outside its allowlist', bad.outsideAllowlistKey, 403, 'ip_not_allowed'],
  ];
  const scope = op.access.includes(':') ? op.access : null;
  if (scope) {
    // A key scoped to something else (projects:read for everything but projects, agents:read for projects).
    const other = scope.startsWith('projects') ? keyScopedTo['agents:read'] : keyScopedTo['projects:read'];
    out.push([`a key without ${scope}`, other, 403]);
    if (scope.endsWith(':write') && keyScopedTo[scope.replace(':write', ':read')])
      out.push([`a key with only ${scope.replace(':write', ':read')}`, keyScopedTo[scope.replace(':write', ':read')], 403]);
  }
  if (['unscoped', 'manager', 'sessionManager'].includes(op.access))
    out.push(['a key with a scope list', keyScopedTo['projects:read'], 403]);
  if (['manager', 'sessionManager', 'billing:write', 'billing:read:manager', 'audit:read'].includes(op.access))
    out.push(['a member', member.accessToken, 403]);
  if (op.access === 'sessionManager') out.push(['an API key (not a person)', ownerKey, 403]);
  // The OpenAI-compatible API: API keys only, whoever the person is.
  if (op.access === 'llm:use') out.push(["the owner's session (not an API key)", owner.accessToken, 401, 'api_key_required']);
  return out;
}

it('fails on an operation that declares no policy, or one it does not know', () => {
  expect(() => refusals({ method: 'GET', path: '/api/v1/new-thing', access: undefined })).toThrow(/no known x-access/);
  expect(() => refusals({ method: 'GET', path: '/api/v1/new-thing', access: 'everyone' })).toThrow(/no known x-access/);
});

it('finds a known x-access policy on every operation of the document', () => {
  expect(ops.filter((op) => !op.access || !POLICIES.includes(op.access)).map((op) => `${op.method} ${op.path}`)).toEqual([]);
});

it('refuses, on every operation, every caller its policy excludes', async () => {
  expect(ops.length).toBeGreaterThan(70);
  const failures: string[] = [];
  let checked = 0;
  const all: Array<[Op, Refusal]> = [];
  for (const op of ops) {
    const cases = refusals(op);
    if (cases.length) totals.covered++;
    else totals.publicOps++;
    for (const c of cases) all.push([op, c]);
  }
  // Sixteen at a time: a token with an unknown kid waits for the verifier's next key refresh (up to a second, by
  // design), and some 120 of those one after the other took 85 s of this suite.
  let next = 0;
  const check = async () => {
    while (next < all.length) {
      const [op, [caller, token, status, reason]] = all[next++];
      const res = await api.request(op.method, op.path, { token });
      checked++;
      // The OpenAI-compatible API answers in OpenAI's shape: its type says which refusal, its code the reason.
      const openAi = op.path.startsWith('/v1/');
      const wrongShape = openAi
        ? res.body?.error?.type !== (status === 401 ? 'authentication_error' : 'permission_error') ||
          (reason !== undefined && res.body.error.code !== reason) ||
          !('param' in res.body.error)
        : res.body?.error?.code !== (status === 401 ? 'UNAUTHORIZED' : 'FORBIDDEN') ||
          (reason !== undefined && res.body.error.details?.reason !== reason);
      if (res.status !== status || wrongShape)
        failures.push(
          `${op.method} ${op.path} (${op.access}) with ${caller}: ${res.status} ${JSON.stringify(res.body?.error ?? res.text.slice(0, 80))}`,
        );
    }
  };
  await Promise.all(Array.from({ length: 16 }, check));
  totals.cases = checked;
  expect(failures).toEqual([]);
  expect(checked).toBeGreaterThan(700);
});

it('lets each policy through for the callers it admits (a refusal, if any, is not about access)', async () => {
  const admitted: Record<string, string> = {
    authenticated: member.accessToken,
    unscoped: member.accessToken,
    manager: owner.accessToken,
    sessionManager: owner.accessToken,
    'billing:write': owner.accessToken,
    'billing:read:manager': owner.accessToken,
    'projects:read': keyScopedTo['projects:read'],
    'agents:read': keyScopedTo['agents:read'],
    'secrets:read': keyScopedTo['secrets:read'],
    'billing:read': keyScopedTo['billing:read'],
    'events:read': keyScopedTo['events:read'],
    'llm:use': keyScopedTo['llm:use'],
    operator: ADMIN,
  };
  const failures: string[] = [];
  for (const op of ops) {
    const token = admitted[op.access ?? ''];
    if (!token || op.method !== 'GET') continue; // reads only: no side effects from the matrix
    // An unknown Last-Event-ID: an admitted live stream (GET /events/stream) answers 404 instead of staying open.
    const res = await api.request(op.method, op.path, { token, headers: { 'last-event-id': 'evt_route_matrix_none' } });
    totals.admitted++;
    if (res.status === 401 || (res.status === 403 && res.body?.error?.details?.reason !== 'ip_not_allowed'))
      failures.push(`${op.method} ${op.path} (${op.access}): ${res.status} ${JSON.stringify(res.body?.error)}`);
  }
  expect(failures).toEqual([]);
});

it('checks access before anything else: a refused caller never learns whether an id exists', async () => {
  const { body } = await api.post('/api/v1/projects', { name: 'exists' }, { token: owner.accessToken });
  const real = await api.get(`/api/v1/projects/${body.data.id}`, { token: keyScopedTo['agents:read'] });
  const fake = await api.get('/api/v1/projects/prj_doesnotexist000', { token: keyScopedTo['agents:read'] });
  expectError(real, 403, 'FORBIDDEN');
  expectError(fake, 403, 'FORBIDDEN');
  expect(real.body.error).toEqual(fake.body.error);
});
