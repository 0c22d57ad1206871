import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, createKey, eventually, signUp, type Account, type Client, type Res } from '../helpers/http';
import { loadOperations, sample, type Operation, type Schema } from '../helpers/openapi';
import { startStack, type Stack } from '../helpers/stack';
import { isOpenAiOp, realParam, seedTargets, tenantSnapshot } from '../helpers/targets';

// Idempotency-Key on every POST of the OpenAPI document (CONTRACT.md 14), on one system: the same key twice is one
// effect and the identical answer replayed; the key with another request is a 422; a request while the first with
// its key still runs is a 409 (for one route with a held answer, and for every POST sent twice at once).
jest.setTimeout(60_000);

let stack: Stack;
let api: Client;
let fake: FakeProviderServer;
let owner: Account;
let key: string;
let keyId: string;
let ids: Record<string, string> = {};
let posts: Operation[] = [];
const PROVIDER_KEY = 'sk-idem-provider-' + 'p'.repeat(32);

beforeAll(async () => {
  fake = await startFakeOpenAI({ apiKey: PROVIDER_KEY });
  stack = await startStack({ env: { RATE_LIMIT_MAX: '1000000', EGRESS_ALLOW_PRIVATE: 'true', CHAT_POLL_MS: '50', AGENTS_POLL_MS: '50' } });
  api = client(stack.url);
  owner = await signUp(api, 'Idempotent');
  ids = await seedTargets(api, owner);
  await api.patch(
    '/api/v1/tenant/settings/llm',
    { provider: 'openai', baseUrl: fake.url, model: 'gpt-test', apiKey: PROVIDER_KEY },
    {
      token: owner.accessToken,
    },
  );
  ({ key, id: keyId } = await createKey(api, owner.accessToken));
  // Authenticated POSTs; logging out would end the session the others use (its replay is covered like any other).
  posts = (await loadOperations(api)).filter((o) => o.method === 'POST' && o.access !== 'public' && o.operationId !== 'logout');
});
afterAll(async () => {
  await stack.stop();
  await fake.close();
});

const pathOf = (op: Operation) => op.path.replace(/\{(\w+)\}/g, (_, name: string) => encodeURIComponent(realParam(ids, op, name)));
/** Bodies the smallest sample does not make valid (a list that needs an item). */
const BODIES: Record<string, unknown> = {
  createWebhook: { url: 'http://127.0.0.1:9/hook', events: ['project.created'] },
  openaiCreateChatCompletion: { model: 'gpt-test', messages: [{ role: 'user', content: 'hi' }] },
};
const bodyOf = (op: Operation) => BODIES[op.operationId] ?? (op.body ? sample(op.body) : undefined);
const send = (op: Operation, idemKey: string, body = bodyOf(op)) =>
  api.post(pathOf(op), body, { token: isOpenAiOp(op) ? key : owner.accessToken, headers: { 'idempotency-key': idemKey } });

/** The same body with one field changed, still valid; null when the schema leaves nothing to change. */
function anotherBody(op: Operation): unknown {
  const body = bodyOf(op) as Record<string, unknown> | undefined;
  if (!body || !op.body?.properties) return null;
  for (const [name, s] of Object.entries(op.body.properties as Record<string, Schema>)) {
    if (s.type === 'string' && !s.anyOf && typeof body[name] === 'string' && (s.maxLength ?? 2) > (body[name] as string).length)
      return { ...body, [name]: `${body[name] as string}y` };
  }
  return null;
}

/** An answer that is kept: not a 5xx, a 429 or a 408 (those release the key for a retry). */
const kept = (res: Res) => res.status < 500 && res.status !== 429 && res.status !== 408;
const reasonOf = (res: Res) => res.body?.error?.details?.reason ?? res.body?.error?.code;

it('every POST: the same key twice is one effect and the first answer replayed; the key with another request is a 422', async () => {
  expect(posts.length).toBeGreaterThan(20);
  const firsts = new Map<string, Res>();
  for (const op of posts) firsts.set(op.operationId, await send(op, `first-${op.operationId}`));
  const before = await tenantSnapshot(api, owner, ids, [keyId]);
  const replayed: string[] = [];
  for (const op of posts) {
    const first = firsts.get(op.operationId)!;
    const again = await send(op, `first-${op.operationId}`);
    const what = `${op.method} ${op.path} (first ${first.status})`;
    if (first.headers.get('content-type')?.startsWith('text/event-stream')) {
      expect([what, again.status, reasonOf(again)]).toEqual([what, 409, 'idempotency_key_streamed']);
      continue;
    }
    if (!kept(first)) {
      expect([what, again.headers.get('idempotent-replayed')]).toEqual([what, null]);
      continue;
    }
    expect([what, again.status, again.headers.get('idempotent-replayed'), again.text]).toEqual([what, first.status, 'true', first.text]);
    expect(again.headers.get('x-request-id')).toBe(first.headers.get('x-request-id'));
    replayed.push(op.operationId);
    // The key with another request: another body when the schema allows one, else another route.
    const other = anotherBody(op);
    const reused =
      other !== null
        ? await send(op, `first-${op.operationId}`, other)
        : await send(
            posts.find((p) => p !== op && !isOpenAiOp(p) === !isOpenAiOp(op))!,
            `first-${op.operationId}`,
          );
    expect([what, reused.status, reasonOf(reused)]).toEqual([what, 422, 'idempotency_key_reused']);
  }
  // The creates and actions whose repetition would show: each replayed, none done again.
  expect(replayed).toEqual(expect.arrayContaining(['createProject', 'createApiKey', 'createWebhook', 'createAgent', 'createChatSession']));
  expect(await tenantSnapshot(api, owner, ids, [keyId])).toEqual(before);
});

it('a bad key is a 400 in the envelope; keys are kept per API key', async () => {
  for (const bad of ['', 'x'.repeat(256), 'caf\u00e9']) {
    const res = await api
      .post('/api/v1/projects', { name: 'p' }, { token: owner.accessToken, headers: { 'idempotency-key': bad } })
      .catch(() => null);
    // fetch refuses a non-Latin-1 header itself; the others reach the gateway.
    if (res)
      expect([res.status, res.body.error.code, res.body.error.details.fields[0].field]).toEqual([
        400,
        'VALIDATION_ERROR',
        'Idempotency-Key',
      ]);
  }
  const other = await createKey(api, owner.accessToken);
  const asKey = (k: string) => api.post('/api/v1/projects', { name: 'per key' }, { token: k, headers: { 'idempotency-key': 'shared' } });
  const [a, b] = [await asKey(key), await asKey(other.key)];
  expect([a.status, b.status, b.headers.get('idempotent-replayed')]).toEqual([201, 201, null]);
  expect(a.body.data.id).not.toBe(b.body.data.id);
});

it('while the first request with a key runs, the same key answers 409 idempotency_key_in_progress; then the answer is replayed', async () => {
  // The provider's answer is held back: the first request is still running while the second arrives.
  fake.script({ type: 'text', text: 'held answer', holdEndMs: 1500 });
  const body = { model: 'gpt-test', messages: [{ role: 'user', content: 'hold' }] };
  const headers = { 'idempotency-key': 'concurrent-1' };
  const first = api.post('/v1/chat/completions', body, { token: key, headers });
  await eventually(async () => fake.requests.some((r) => JSON.stringify(r.body ?? '').includes('hold')), 10_000);
  const second = await api.post('/v1/chat/completions', body, { token: key, headers });
  expect([second.status, second.body.error.code]).toEqual([409, 'idempotency_key_in_progress']);
  const done = await first;
  expect(done.status).toBe(200);
  const third = await api.post('/v1/chat/completions', body, { token: key, headers });
  expect([third.status, third.headers.get('idempotent-replayed'), third.text]).toEqual([200, 'true', done.text]);
  expect(fake.requests.filter((r) => JSON.stringify(r.body ?? '').includes('hold'))).toHaveLength(1);
});

it('a /v1 call let through again after a 5xx is not made again: its failure is replayed; a call the model refused runs afresh', async () => {
  const asked = (word: string) => fake.requests.filter((r) => JSON.stringify(r.body ?? '').includes(word)).length;
  const complete = (word: string, idemKey: string) =>
    api.post(
      '/v1/chat/completions',
      { model: 'gpt-test', messages: [{ role: 'user', content: word }] },
      { token: key, headers: { 'idempotency-key': idemKey } },
    );
  // Cut by the provider after its first words: the call was made (and billed); the gateway keeps no 5xx answer, so
  // the retry reaches the chat service, which answers what the call ended with instead of calling the model again.
  fake.script({ type: 'cut', afterChunks: 2, text: 'a few words then nothing' });
  const cut = await complete('cut-midway', 'v1-cut');
  expect([cut.status, reasonOf(cut)]).toEqual([503, expect.stringMatching(/^llm_/)]);
  const again = await complete('cut-midway', 'v1-cut');
  expect([again.status, again.text]).toEqual([503, cut.text]);
  expect(asked('cut-midway')).toBe(1);
  // Refused before answering: nothing was made or billed, so the key is free and the retry calls the model.
  fake.script({ type: 'error', status: 400, message: 'refused' });
  expect((await complete('refused-first', 'v1-refused')).status).toBe(503);
  const retried = await complete('refused-first', 'v1-refused');
  expect([retried.status, asked('refused-first')]).toEqual([200, 2]);
});

it('every POST sent twice at once with one key: one of the two does the work, the other is a 409 in progress or its replay', async () => {
  const isKeyConflict = (res: Res) => res.status === 409 && /^idempotency_key_(in_progress|streamed)$/.test(String(reasonOf(res)));
  const doneTwice: string[] = [];
  for (const op of posts) {
    const idemKey = `pair-${op.operationId}`;
    const pair = await Promise.all([send(op, idemKey), send(op, idemKey)]);
    const what = `${op.method} ${op.path} (${pair.map((r) => r.status).join(', ')})`;
    // Answered by the work itself: neither replayed nor refused for the key.
    const fresh = pair.filter((r) => r.headers.get('idempotent-replayed') === null && !isKeyConflict(r));
    expect([what, fresh.length > 0]).toEqual([what, true]);
    // Two only when the first answer was not kept (a 5xx, 429 or 408 frees the key for a retry).
    if (fresh.filter(kept).length > 1) doneTwice.push(what);
    for (const r of pair.filter((r) => r.headers.get('idempotent-replayed') === 'true'))
      expect([what, r.status, r.text]).toEqual([what, fresh[0].status, fresh[0].text]);
  }
  expect(doneTwice).toEqual([]);
});
