import { client, createKey, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// Every operation of the OpenAPI document against the policy it declares (x-access), with every kind of caller that
// policy must refuse: no credential, a forged one, a key scoped elsewhere, a key with any scope list where none is
// allowed, a member where owners and admins are needed, an API key where a person is needed, and for the operator
// API a wrong token and a tenant's credential. Refusals come before validation, so no body is sent.
jest.setTimeout(120_000);

const ADMIN = 'operator-token-for-the-route-matrix-0123';
let stack: Stack;
let api: Client;
let owner: Account;
let member: Account;
let ownerKey: string;
const keyScopedTo: Record<string, string> = {};

interface Op {
  method: string;
  path: string;
  access: string;
}
let ops: Op[] = [];

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
  for (const scope of ['projects:read', 'agents:read', 'secrets:read', 'billing:read'])
    keyScopedTo[scope] = (await createKey(api, owner.accessToken, { scopes: [scope] })).key;
  const doc = (await api.get('/api/v1/openapi.json')).body;
  ops = Object.entries(doc.paths as Record<string, Record<string, { 'x-access': string }>>).flatMap(([path, methods]) =>
    Object.entries(methods).map(([method, o]) => ({
      method: method.toUpperCase(),
      path: path.replace(/\{(\w+)\}/g, 'xx_none'),
      access: o['x-access'],
    })),
  );
});
afterAll(() => stack.stop());

type Refusal = [caller: string, token: string | undefined, status: 401 | 403];

/** The callers each policy must refuse, and how. */
function refusals(op: Op): Refusal[] {
  if (op.access === 'public') return [];
  if (op.access === 'operator')
    return [
      ['no credential', undefined, 401],
      ['a wrong operator token', 'not-the-operator-token-at-all-0000', 401],
      ["a tenant owner's session", owner.accessToken, 403],
      ["a tenant owner's API key", ownerKey, 403],
    ];
  const out: Refusal[] = [
    ['no credential', undefined, 401],
    ['a forged token', 'eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.', 401],
    ['an unknown API key', `svc_sdk_${'x'.repeat(43)}`, 401],
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
  if (['manager', 'sessionManager', 'billing:write'].includes(op.access)) out.push(['a member', member.accessToken, 403]);
  if (op.access === 'sessionManager') out.push(['an API key (not a person)', ownerKey, 403]);
  return out;
}

it('refuses, on every operation, every caller its policy excludes', async () => {
  expect(ops.length).toBeGreaterThan(70);
  const failures: string[] = [];
  let checked = 0;
  for (const op of ops) {
    for (const [caller, token, status] of refusals(op)) {
      const res = await api.request(op.method, op.path, { token });
      checked++;
      if (res.status !== status || res.body?.error?.code !== (status === 401 ? 'UNAUTHORIZED' : 'FORBIDDEN'))
        failures.push(
          `${op.method} ${op.path} (${op.access}) with ${caller}: ${res.status} ${res.body?.error?.code ?? res.text.slice(0, 80)}`,
        );
    }
  }
  expect(failures).toEqual([]);
  expect(checked).toBeGreaterThan(250);
});

it('lets each policy through for the callers it admits (a refusal, if any, is not about access)', async () => {
  const admitted: Record<string, string> = {
    authenticated: member.accessToken,
    unscoped: member.accessToken,
    manager: owner.accessToken,
    sessionManager: owner.accessToken,
    'billing:write': owner.accessToken,
    'projects:read': keyScopedTo['projects:read'],
    'agents:read': keyScopedTo['agents:read'],
    'secrets:read': keyScopedTo['secrets:read'],
    operator: ADMIN,
  };
  const failures: string[] = [];
  for (const op of ops) {
    const token = admitted[op.access];
    if (!token || op.method !== 'GET') continue; // reads only: no side effects from the matrix
    const res = await api.request(op.method, op.path, { token });
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
