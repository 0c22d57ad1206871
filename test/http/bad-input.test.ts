import { client, createKey, expectError, signUp, type Account, type Client, type Res } from '../helpers/http';
import { accepts, isErrorEnvelope, isOpenAiError, loadOperations, sample, type Operation } from '../helpers/openapi';
import { startStack, type Stack } from '../helpers/stack';
import { isOpenAiOp, realParam, seedTargets, tenantSnapshot } from '../helpers/targets';

// Bad input on every route: the route list comes from /api/v1/openapi.json, so a new route is covered the day it
// is added. Every bad request must be a 4xx in the error envelope (never a 5xx, never a success), and nothing may
// change.
let stack: Stack;
let api: Client;
let owner: Account;
/** A session of the owner used only by the bad requests: it must still work at the end (no bad logout). */
let fuzzToken: string;
/** The owner's API key, for the OpenAI-compatible routes (API keys only). */
let fuzzKey: string;
let fuzzKeyId = '';
let ids: Record<string, string> = {};
let ops: Operation[] = [];

beforeAll(async () => {
  // Private addresses allowed: the registration among the targets points at a closed port on loopback.
  stack = await startStack({ env: { RATE_LIMIT_MAX: '1000000', EGRESS_ALLOW_PRIVATE: 'true' } });
  api = client(stack.url);
  owner = await signUp(api, 'Fuzzed');
  fuzzToken = (await api.post('/api/v1/auth/login', { email: owner.email, password: owner.password })).body.data.accessToken;
  ids = await seedTargets(api, owner);
  ({ key: fuzzKey, id: fuzzKeyId } = await createKey(api, owner.accessToken));
  ops = await loadOperations(api);
});
afterAll(() => stack.stop());

const snapshot = () => tenantSnapshot(api, owner, ids, [fuzzKeyId]);
const pathWith = (op: Operation, override: Record<string, string> = {}) =>
  op.path.replace(/\{(\w+)\}/g, (_, name: string) => (name in override ? override[name] : encodeURIComponent(realParam(ids, op, name))));

/** Ids no service has made: each once ended a process or might (gRPC metadata, logs, URLs). */
const UNICODE_IDS: Array<[string, string]> = [
  ['a non-ASCII letter', 'é'],
  ['an emoji', 'prj_💥'],
  ['a zero-width space', 'prj_\u200b1'],
  ['an RTL override', '\u202eprj_1'],
  ['a NUL inside', 'prj_\u00001'],
  ['a Latin-1 run', 'ä'.repeat(60)],
];

const HUGE = 'h'.repeat(100_000);
const deep = (levels: number, leaf: unknown = 1): unknown => (levels === 0 ? leaf : { a: deep(levels - 1, leaf) });
const BAD_VALUES: Array<[string, unknown]> = [
  ['a number', 123],
  ['a fraction', 1.5],
  ['a boolean', true],
  ['null', null],
  ['an array', ['x']],
  ['an empty array', []],
  ['an object', { a: 1 }],
  ['a 100k-character string', HUGE],
  ['a MongoDB $gt operator', { $gt: '' }],
  ['a MongoDB $ne operator', { $ne: null }],
  ['a $where operator', { $where: 'sleep(1000)' }],
  ['an array of operators', [{ $gt: '' }]],
  ['an empty string', ''],
  ['200 levels of nesting', deep(200)],
  ['a constructor.prototype object', { constructor: { prototype: { polluted: true } } }],
];

interface Case {
  name: string;
  method: string;
  path: string;
  raw?: string | Buffer;
  contentType?: string;
}

function bodyCases(op: Operation): Case[] {
  const out: Case[] = [];
  if (op.method === 'GET') return out;
  const json = (name: string, value: unknown, path = pathWith(op)) =>
    out.push({ name, method: op.method, path, raw: JSON.stringify(value) });
  const rawCase = (name: string, raw: string | Buffer) => out.push({ name, method: op.method, path: pathWith(op), raw });
  // Bodies that fail while being read, whether or not the route takes one.
  rawCase('malformed JSON', '{"name": ');
  rawCase('200 levels of nested arrays', '['.repeat(200) + ']'.repeat(200));
  rawCase('a __proto__ key', `{"__proto__": {"polluted": true}}`);
  rawCase('a nested __proto__ key', `{"a": {"b": {"__proto__": {"polluted": true}}}}`);
  rawCase('a constructor.prototype key', `{"constructor": {"prototype": {"polluted": true}}}`);
  rawCase('trailing garbage', '{} x');
  rawCase('a lone brace', '{');
  if (!op.body) return out;
  rawCase('a bare string', '"text"');
  rawCase('invalid UTF-8', Buffer.concat([Buffer.from('{"name": "'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}')]));
  const base = sample(op.body) as Record<string, unknown>;
  json('an array instead of an object', [base]);
  json('null instead of an object', null);
  json('a number instead of an object', 42);
  json('200 levels of nested objects', deep(200, base));
  rawCase(
    'a __proto__ key beside valid fields',
    JSON.stringify(base).replace(/^\{/, '{"__proto__": {"polluted": true},').replace(/,\}$/, '}'),
  );
  json('an unknown field (mass assignment)', { ...base, tenantId: 'ten_other', role: 'owner', id: 'x' });
  json('a constructor field', { ...base, constructor: { prototype: { polluted: true } } });
  for (const [field, schema] of Object.entries(op.body.properties ?? {})) {
    for (const [label, value] of BAD_VALUES) if (!accepts(schema, value)) json(`${field} = ${label}`, { ...base, [field]: value });
  }
  if ((op.body.required ?? []).length) json('no fields at all', {});
  // Every id field of every body with ids no service has made.
  for (const field of Object.keys(op.body.properties ?? {}).filter((f) => /Id$/.test(f)))
    for (const [label, value] of UNICODE_IDS) json(`${field} = ${label}`, { ...base, [field]: value });
  return out;
}

function queryCases(op: Operation): Case[] {
  const out: Case[] = [];
  const q = (name: string, query: string) => out.push({ name, method: op.method, path: `${pathWith(op)}?${query}` });
  q('an unknown parameter', 'tenantId=ten_other');
  q('a __proto__ parameter', '__proto__[polluted]=1');
  q('a constructor parameter', 'constructor[prototype][polluted]=1');
  for (const { name, schema } of op.query) {
    if (schema.type === 'integer')
      for (const v of ['abc', '-1', '0', '1.5', '1e400', '99999999999999999999', '', 'null'])
        if (!accepts(schema, Number(v)) || v === '' || v === 'abc' || v === 'null') q(`${name}=${v}`, `${name}=${encodeURIComponent(v)}`);
    q(`${name} repeated`, `${name}=1&${name}=2`);
    q(`${name} with a $gt operator`, `${name}[$gt]=`);
    q(`${name} as a JSON operator`, `${name}=${encodeURIComponent('{"$gt":""}')}`);
    q(`${name} of 100k characters`, `${name}=${'q'.repeat(100_000)}`);
    q(`${name} of 10k characters`, `${name}=${'q'.repeat(10_000)}`);
    q(`${name} with a NUL byte`, `${name}=%00`);
    if (name === 'cursor')
      for (const c of ['garbage', 'eyJ4IjoxfQ', Buffer.from('{"$gt":""}').toString('base64url')]) q(`cursor=${c}`, `cursor=${c}`);
  }
  return out;
}

function paramCases(op: Operation): Case[] {
  const out: Case[] = [];
  for (const name of op.params) {
    for (const [label, value] of [
      ['100k characters', 'p'.repeat(100_000)],
      ['150 characters', 'p'.repeat(150)],
      ['a NUL byte', '%00'],
      ['a JSON operator', encodeURIComponent('{"$gt":""}')],
      ['$gt', '$gt'],
      ['__proto__', '__proto__'],
      ['constructor', 'constructor'],
      ['an encoded path traversal', '..%2F..%2Fetc%2Fpasswd'],
      ['a bad percent-encoding', '%E0%A4%A'],
      ['a lone surrogate', '%ED%A0%80'],
      ['an SQL fragment', encodeURIComponent("' OR '1'='1")],
      ['a JSON path', encodeURIComponent('$.tenantId')],
      // Text that is not ASCII once reached gRPC metadata and ended the service (issue 8).
      ...UNICODE_IDS.map(([label, id]) => [label, encodeURIComponent(id)]),
    ])
      out.push({
        name: `:${name} = ${label}`,
        method: op.method,
        path: pathWith(op, { [name]: value }),
        raw: op.body ? JSON.stringify(sample(op.body)) : undefined,
      });
  }
  return out;
}

async function send(c: Case, op: Operation): Promise<Res> {
  const token = op.access === 'public' ? undefined : isOpenAiOp(op) ? fuzzKey : fuzzToken;
  const headers: Record<string, string> = {};
  if (c.raw !== undefined) headers['content-type'] = c.contentType ?? 'application/json';
  return api.request(c.method, c.path, { token, raw: c.raw, headers });
}

it('finds the gateway and identity routes in the OpenAPI document', () => {
  const names = ops.map((o) => `${o.method} ${o.path}`);
  expect(names).toEqual(
    expect.arrayContaining([
      'POST /api/v1/auth/register',
      'POST /api/v1/api-keys',
      'PATCH /api/v1/tenant/team/members/{userId}',
      'PUT /api/v1/tenant/security/network',
    ]),
  );
  for (const o of ops) for (const p of o.params) expect(ids[p]).toBeDefined();
});

it('answers every bad request on every route with a 4xx in the error envelope and changes nothing', async () => {
  const before = await snapshot();
  const failures: string[] = [];
  let sent = 0;
  const codes: Record<string, number> = {};
  for (const op of ops) {
    const cases = [...bodyCases(op), ...queryCases(op), ...paramCases(op)];
    for (let i = 0; i < cases.length; i += 8) {
      await Promise.all(
        cases.slice(i, i + 8).map(async (c) => {
          const res = await send(c, op);
          sent++;
          const openAi = isOpenAiOp(op);
          const ok = res.status >= 400 && res.status < 500 && (openAi ? isOpenAiError(res) : isErrorEnvelope(res));
          // OpenAI's shape names the same refusals by type: counted under our codes.
          const code = openAi
            ? (({ 400: 'VALIDATION_ERROR', 404: 'RESOURCE_NOT_FOUND' } as Record<number, string>)[res.status] ?? res.body?.error?.code)
            : res.body?.error?.code;
          codes[`${res.status} ${code}`] = (codes[`${res.status} ${code}`] ?? 0) + 1;
          if (!ok) failures.push(`${op.method} ${op.path} [${c.name}] -> ${res.status} ${res.text.slice(0, 200)}`);
        }),
      );
    }
  }
  expect(failures).toEqual([]);
  expect(sent).toBeGreaterThan(500);
  // The credential was good throughout: refusals are about the input (or an id that names nothing).
  expect(Object.keys(codes).sort()).toEqual(['400 VALIDATION_ERROR', '404 RESOURCE_NOT_FOUND']);
  // Nothing changed: same tenant, projects, keys, members, allowlist and settings; the owner still signs in.
  expect(await snapshot()).toEqual(before);
  expect((await api.get('/api/v1/auth/me', { token: fuzzToken })).status).toBe(200);
  expect((await api.post('/api/v1/auth/login', { email: owner.email, password: owner.password })).status).toBe(200);
  // No prototype was polluted in this process either (the gateway runs in it).
  expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  // Every service still serves.
  expect((await api.get('/readyz')).status).toBe(200);
  // Some 600 requests, eight at a time: on the 2-core CI machine beside the other suites it needs more than 30 s.
}, 120_000);

it('MongoDB operators never sign anyone in', async () => {
  for (const body of [
    { email: owner.email, password: { $ne: null } },
    { email: { $gt: '' }, password: { $gt: '' } },
    { email: { $regex: '.*' }, password: owner.password },
  ]) {
    const res = await api.post('/api/v1/auth/login', body);
    expectError(res, 400, 'VALIDATION_ERROR');
  }
  expectError(await api.post('/api/v1/auth/refresh', { refreshToken: { $ne: null } }), 400, 'VALIDATION_ERROR');
});

it('answers an id that cannot exist with a plain 404 naming it, for path parameters of every kind', async () => {
  const t = { token: owner.accessToken };
  for (const [method, path, resource, id] of [
    ['GET', '/api/v1/projects/%C3%A9', 'project', 'é'],
    ['GET', `/api/v1/agents/${ids['agents:id']}/runs/%F0%9F%92%A5`, 'run', '💥'],
    ['DELETE', '/api/v1/tenant/team/members/%E2%80%AEusr_1', 'member', '\u202eusr_1'],
    ['GET', '/api/v1/chat/sessions/a%E2%80%8Bb', 'chat_session', 'a\u200bb'],
  ] as const) {
    const error = expectError(await api.request(method, path, t), 404, 'RESOURCE_NOT_FOUND');
    expect(error.details).toEqual({ resource, id });
  }
});
