import fc from 'fast-check';
import { client, createKey, signUp, type Account, type Client, type Res } from '../helpers/http';
import { acceptsBody, isErrorEnvelope, isOpenAiError, loadOperations, sample, type Operation, type Schema } from '../helpers/openapi';
import { startStack, type Stack } from '../helpers/stack';
import { isOpenAiOp, realParam, seedTargets, tenantSnapshot } from '../helpers/targets';

// Property-based bad input over every operation of the OpenAPI document (fast-check). Two properties:
//  - refused input: a body the operation's schema rejects, with hostile values in its fields, path, query and
//    headers. Always a 4xx in the error envelope, and at the end nothing of the tenant has changed;
//  - hostile but well-formed input: every string within its schema's bounds but made of Unicode edge cases (lone
//    surrogates, NUL, zero-width, RTL override, emoji, prototype and MongoDB operator names), sent by another
//    tenant. It may succeed; it may never be a 5xx, and a refusal is still the envelope.
// After both: no prototype polluted, every service ready. CI runs a fixed seed and count (FUZZ_SEED, FUZZ_RUNS per
// operation); `npm run test:soak` runs many more. The totals are printed at the end.
jest.setTimeout(Number(process.env.FUZZ_TIMEOUT_MS ?? 300_000));

const SEED = Number(process.env.FUZZ_SEED ?? 20261124);
const RUNS = Number(process.env.FUZZ_RUNS ?? 4);

let stack: Stack;
let api: Client;
let owner: Account;
let other: Account;
/** The owner's session used by the refused cases; it must still work at the end. */
let fuzzToken: string;
/** API keys of the two tenants: the OpenAI-compatible API (/v1) takes nothing else. */
let fuzzKey: string;
let fuzzKeyId = '';
let otherKey: string;
let ids: Record<string, string> = {};
let otherIds: Record<string, string> = {};
let ops: Operation[] = [];
const totals = { cases: 0, fiveHundreds: 0, byStatus: {} as Record<string, number> };

beforeAll(async () => {
  // Limits that would refuse the fuzz's volume from one address are lifted: the suite is about input, not floods.
  stack = await startStack({ env: { RATE_LIMIT_MAX: '100000000', LOGIN_ATTEMPTS_PER_ADDRESS: '100000000', EGRESS_ALLOW_PRIVATE: 'true' } });
  api = client(stack.url);
  owner = await signUp(api, 'Fuzz owner');
  other = await signUp(api, 'Fuzz other');
  fuzzToken = (await api.post('/api/v1/auth/login', { email: owner.email, password: owner.password })).body.data.accessToken;
  ids = await seedTargets(api, owner);
  otherIds = await seedTargets(api, other);
  ({ key: fuzzKey, id: fuzzKeyId } = await createKey(api, owner.accessToken));
  otherKey = (await createKey(api, other.accessToken)).key;
  ops = await loadOperations(api);
});
afterAll(async () => {
  process.stdout.write(
    `fuzz: seed ${SEED}, ${RUNS} runs per property and operation, ${totals.cases} requests, ${totals.fiveHundreds} 5xx; ` +
      `${JSON.stringify(totals.byStatus)}\n`,
  );
  await stack.stop();
});

// ---- values ---------------------------------------------------------------------------------------------------

const EDGE_STRINGS = [
  '',
  '\u0000',
  'a\u0000b',
  '\u200b',
  '\u202egnp.exe',
  '\ufeff',
  '💥🧨',
  '\ud800',
  'x\udfffy',
  'é',
  '__proto__',
  'constructor',
  'prototype',
  '$gt',
  '$where',
  '{"$ne":null}',
  '../../etc/passwd',
  "' OR '1'='1",
  '<script>alert(1)</script>',
  '%00',
  '\r\nX-Injected: 1',
  ' ',
];

/** Text made of the characters that break things: any code point (lone surrogates included), plus known cases. */
const edgeString = (maxLength = 40) =>
  fc.oneof(
    fc.constantFrom(...EDGE_STRINGS),
    fc.string({ unit: 'binary', maxLength }),
    fc.string({ unit: fc.constantFrom('\u0000', '\u200b', '\u202e', '\ud800', '\udc00', '💥', 'a', '$', '.', '/'), maxLength }),
  );

const keyName = fc.oneof(fc.constantFrom('__proto__', 'constructor', 'prototype', '$gt', '$where', 'tenantId', 'id'), edgeString(12));

/** Any JSON value, hostile keys and deep nesting included. */
const hostileValue: fc.Arbitrary<unknown> = fc.letrec<{ v: unknown }>((tie) => ({
  v: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    edgeString(),
    fc.integer(),
    fc.constantFrom(0, -1, 2 ** 31, 2 ** 53, -(2 ** 53), 1e308, 0.5, -0.0),
    fc.boolean(),
    fc.constant(null),
    fc.array(tie('v'), { maxLength: 4 }),
    fc.dictionary(keyName, tie('v'), { maxKeys: 4 }),
    fc.constant('h'.repeat(70_000)),
    fc.integer({ min: 50, max: 300 }).map((n) => JSON.parse('['.repeat(n) + ']'.repeat(n))),
  ),
})).v;

/** A field's value: its valid sample, or something hostile. */
const fieldValue = (s: Schema) => fc.oneof(fc.constant(sample(s)), hostileValue);

/** Percent-encodes every byte: invalid UTF-8 and any separator reach the server as sent. */
const encodeBytes = (bytes: Uint8Array) => Array.from(bytes, (b) => `%${b.toString(16).padStart(2, '0')}`).join('');
const utf8 = (s: string) => new Uint8Array(Buffer.from(s, 'utf8'));
const pathValue = fc.oneof(
  edgeString().map((s) => encodeBytes(utf8(s))),
  fc.uint8Array({ minLength: 1, maxLength: 30 }).map(encodeBytes),
);

/** Mostly the usual value, now and then a hostile one: each case reaches past the first check more often. */
const mostly = <T, U>(usual: T, hostile: fc.Arbitrary<U>) =>
  fc.oneof({ arbitrary: fc.constant(usual), weight: 3 }, { arbitrary: hostile, weight: 1 });

const CONTENT_TYPES = [
  'application/json',
  'application/json; charset=utf-8',
  'application/json; charset=utf-16',
  'text/plain',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=x',
  'application/json; charset=',
  'application/jsonx',
  '*/*',
];
/** Header values a client can send (Latin-1, no control characters but tab). */
const headerText = fc.string({
  unit: fc.integer({ min: 0x20, max: 0xff }).map((c) => String.fromCharCode(c === 0x7f ? 0x20 : c)),
  maxLength: 200,
});
const headers = fc.record(
  {
    'content-type': mostly('application/json', fc.oneof(fc.constantFrom(...CONTENT_TYPES), headerText)),
    'idempotency-key': headerText,
    'x-request-id': headerText,
    'accept-language': headerText,
    'x-forwarded-for': fc.oneof(headerText, fc.constant('1.2.3.4, 127.0.0.1')),
  },
  { requiredKeys: ['content-type'] },
);

// ---- cases ----------------------------------------------------------------------------------------------------

interface Case {
  body: unknown;
  rawBody?: string;
  params: Record<string, string | null>;
  query: Array<[string, string]>;
  headers: Record<string, string>;
}

function pathOf(op: Operation, c: Case, targets: Record<string, string>): string {
  const path = op.path.replace(/\{(\w+)\}/g, (_, name: string) => c.params[name] ?? encodeURIComponent(realParam(targets, op, name)));
  const query = c.query.map(([k, v]) => `${encodeBytes(utf8(k))}=${encodeBytes(utf8(v))}`).join('&');
  return query ? `${path}?${query}` : path;
}

/** Some path parameters replaced (null keeps the real id), now and then a query of known and unknown names. */
function envelopeOf(op: Operation) {
  const queryName = fc.oneof(fc.constantFrom(...op.query.map((q) => q.name), '__proto__', 'tenantId'), edgeString(10));
  return fc.record({
    params: fc.record(Object.fromEntries(op.params.map((p) => [p, mostly(null, pathValue)]))),
    query: mostly([] as Array<[string, string]>, fc.array(fc.tuple(queryName, edgeString()), { minLength: 1, maxLength: 3 })),
    headers,
  });
}

/** A body the schema rejects: the valid sample with some fields hostile and maybe unknown ones, filtered to bad. */
function refusedBody(s: Schema | undefined) {
  if (!s || s.type !== 'object') return fc.oneof(hostileValue, fc.constant(undefined));
  const fields = Object.fromEntries(Object.entries(s.properties ?? {}).map(([k, f]) => [k, fieldValue(f)]));
  return fc
    .tuple(fc.record(fields, { requiredKeys: [] }), fc.dictionary(keyName, hostileValue, { maxKeys: 2 }))
    .map(([known, extra]) => ({ ...extra, ...known }))
    .filter((b) => !acceptsBody(s, b));
}

/** A body of the schema's shape whose strings are hostile but within their bounds. */
function wellFormedBody(s: Schema | undefined): fc.Arbitrary<unknown> {
  const of = (f: Schema): fc.Arbitrary<unknown> => {
    if (f.anyOf) return fc.oneof(...f.anyOf.map(of));
    if ('const' in f) return fc.constant(f.const);
    if (f.type === 'string')
      return edgeString(Math.min(f.maxLength ?? 40, 40)).filter(
        (x) => x.length >= (f.minLength ?? 0) && x.length <= (f.maxLength ?? Infinity),
      );
    if (f.type === 'object' && f.properties) return wellFormedBody(f);
    return fc.constant(sample(f));
  };
  if (!s || s.type !== 'object') return fc.constant(undefined);
  return fc.record(Object.fromEntries(Object.entries(s.properties ?? {}).map(([k, f]) => [k, of(f)])), { requiredKeys: s.required ?? [] });
}

async function send(op: Operation, c: Case, token: string | undefined, targets: Record<string, string>): Promise<Res> {
  const raw = op.method === 'GET' ? undefined : c.body === undefined ? undefined : JSON.stringify(c.body);
  const hdrs: Record<string, string> = { ...c.headers };
  if (raw === undefined) delete hdrs['content-type'];
  const res = await api.request(op.method, pathOf(op, c, targets), { token, raw, headers: hdrs, streamHeadersOnly: true });
  totals.cases++;
  totals.byStatus[res.status] = (totals.byStatus[res.status] ?? 0) + 1;
  if (res.status >= 500) totals.fiveHundreds++;
  if (process.env.FUZZ_DEBUG)
    process.stdout.write(`${op.method} ${pathOf(op, c, targets).slice(0, 120)} -> ${res.status} ${res.text.slice(0, 160)}\n`);
  return res;
}

/** Routes whose success ends the caller's session (the refused cases must keep theirs). */
const endsSession = (op: Operation) => /\/auth\/logout|\/sessions\/revoke/.test(op.path);

it('refuses input its schema rejects, on every operation, with a 4xx in the envelope, and changes nothing', async () => {
  const before = await tenantSnapshot(api, owner, ids, [fuzzKeyId]);
  const failures: string[] = [];
  for (const [i, op] of ops.entries()) {
    if (!op.body || op.method === 'GET') continue;
    const token = op.access === 'public' ? undefined : isOpenAiOp(op) ? fuzzKey : fuzzToken;
    await fc
      .assert(
        fc.asyncProperty(envelopeOf(op), refusedBody(op.body), async (env, body) => {
          const c: Case = { ...env, body };
          const res = await send(op, c, token, ids);
          const ok = res.status >= 400 && res.status < 500 && (isOpenAiOp(op) ? isOpenAiError(res) : isErrorEnvelope(res));
          if (!ok) failures.push(`${op.method} ${op.path} ${JSON.stringify(c).slice(0, 300)} -> ${res.status} ${res.text.slice(0, 200)}`);
          return ok;
        }),
        { seed: SEED + i, numRuns: RUNS, endOnFailure: true },
      )
      .catch(() => undefined); // failures are collected with their operation, and asserted below
  }
  expect(failures).toEqual([]);
  expect(await tenantSnapshot(api, owner, ids, [fuzzKeyId])).toEqual(before);
  expect((await api.get('/api/v1/auth/me', { token: fuzzToken })).status).toBe(200);
});

it('never answers hostile but well-formed input, in any field, parameter or header, with a 5xx or without the envelope', async () => {
  const failures: string[] = [];
  const otherToken = other.accessToken;
  for (const [i, op] of ops.entries()) {
    if (endsSession(op)) continue;
    const token = op.access === 'public' ? undefined : isOpenAiOp(op) ? otherKey : otherToken;
    await fc
      .assert(
        fc.asyncProperty(envelopeOf(op), wellFormedBody(op.body), async (env, body) => {
          const c: Case = { ...env, body };
          const res = await send(op, c, token, otherIds);
          const ok = res.status < 500 && (res.status < 400 || (isOpenAiOp(op) ? isOpenAiError(res) : isErrorEnvelope(res)));
          if (!ok) failures.push(`${op.method} ${op.path} ${JSON.stringify(c).slice(0, 300)} -> ${res.status} ${res.text.slice(0, 200)}`);
          return ok;
        }),
        { seed: SEED + i, numRuns: RUNS, endOnFailure: true },
      )
      .catch(() => undefined);
  }
  expect(failures).toEqual([]);
});

it('leaves no prototype polluted and every service serving', async () => {
  expect(totals.cases).toBeGreaterThan(ops.length * RUNS);
  expect(totals.fiveHundreds).toBe(0);
  expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  expect(Object.prototype).toEqual({});
  expect((await api.get('/readyz')).status).toBe(200);
  expect((await api.post('/api/v1/auth/login', { email: owner.email, password: owner.password })).status).toBe(200);
});
