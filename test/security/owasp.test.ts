import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, createKey, eventually, expectError, signUp, type Account, type Client, type Res } from '../helpers/http';
import { startS3, type LocalS3 } from '../helpers/object-stores';
import { loadOperations, type Operation } from '../helpers/openapi';
import { startSystem, type SystemProcess } from '../helpers/process';
import { startTestMcpServer, type TestMcpServer } from '../helpers/mcp-server';
import { startReceiver, type Receiver } from '../helpers/receiver';
import { realParam, seedTargets, tenantSnapshot } from '../helpers/targets';

// OWASP API Security Top 10 (2023) cases the route matrix, the tenancy, fuzz and SSRF suites do not already make:
//  - API6 business flows: credit purchases outside the integers the contract allows, gift-card guessing, the
//    Idempotency-Key replayed with another body, another operation or by another tenant, redeeming for someone else;
//  - API4 unrestricted consumption: page sizes over 100 and bodies over 1 MiB on every operation that takes them
//    (open reply streams per tenant: test/http/chat.test.ts, "holds a tenant to SSE_STREAMS_PER_TENANT"; caps on
//    collections: findings.test.ts; queued work: tenant-fairness.test.ts);
//  - API3 excessive data exposure: secret values, webhook secrets, LLM API keys and BYOS keys, once set and used,
//    in no answer of any read route, and (API8) with passwords, API keys and tokens in no log line.
// The system runs as `npm start` does (a process per service) at LOG_LEVEL=debug, so every log line is captured.
jest.setTimeout(240_000);

const ADMIN = 'operator-token-for-the-owasp-suite-0123';
/** Low enough for the guessing test to reach; each test below uses its own principals, well under it. */
const RATE_LIMIT = 200;
let dataDir: string;
let system: SystemProcess;
let api: Client;
let ops: Operation[] = [];
/** Operations whose answer is an event stream (not a JSON read). */
const streams = new Set<string>();
/** Every secret this suite hands the system: none may come back in an answer (but its own) or reach a log line. */
const handedOver = new Map<string, string>();
const totals = { cases: 0, lists: 0, bodies: 0, reads: 0 };

const unique = (label: string) => `${label}-${randomBytes(12).toString('base64url')}`;
function remember(label: string, value: string): string {
  handedOver.set(label, value);
  return value;
}
/** Which remembered secrets a text contains, by label. */
const leaked = (text: string) => [...handedOver].filter(([, v]) => text.includes(v)).map(([k]) => k);
const balanceOf = async (a: Account) => (await api.get('/api/v1/billing/summary', { token: a.accessToken })).body.data.credits.balance;

async function tenant(name: string): Promise<Account> {
  const a = await signUp(api, name);
  remember(`${name} password`, a.password);
  remember(`${name} refresh token`, a.refreshToken);
  remember(`${name} access token`, a.accessToken);
  return a;
}

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'svc-owasp-'));
  system = await startSystem({
    DATA_DIR: dataDir,
    LOG_LEVEL: 'debug',
    SVC_ADMIN_TOKEN: ADMIN,
    RATE_LIMIT_MAX: String(RATE_LIMIT),
    EGRESS_ALLOW_PRIVATE: 'true',
    WEBHOOK_RETRY_SCHEDULE: '1,1',
    // The reply after a key change uses the new key at once (by default chat may keep settings for a second).
    CHAT_LLM_SETTINGS_CACHE_MS: '0',
  });
  api = client(system.url);
  ops = await loadOperations(api);
  const doc = (await api.get('/api/v1/openapi.json')).body;
  for (const [path, methods] of Object.entries(doc.paths as Record<string, Record<string, any>>))
    for (const [method, op] of Object.entries(methods))
      if (op.responses?.['200']?.content?.['text/event-stream']) streams.add(`${method.toUpperCase()} ${path}`);
});
afterAll(async () => {
  console.log(
    `owasp: ${totals.cases} cases; page limits on ${totals.lists} list operations, 413 on ${totals.bodies} operations with a body, ` +
      `${totals.reads} read operations swept for ${handedOver.size} secrets, which no log line holds either`,
  );
  await system?.kill();
  rmSync(dataDir, { recursive: true, force: true });
});

/** A concrete path for an operation, its parameters naming the caller's own resources. */
const pathFor = (op: Operation, ids: Record<string, string>, query = '') =>
  op.path.replace(/\{(\w+)\}/g, (_, name: string) => encodeURIComponent(realParam(ids, op, name))) + query;
/** An API key of each tenant, for the OpenAI-compatible API (API keys only). */
const keysOf = new Map<string, { key: string; id: string }>();
/** The credential an operation's policy admits, in the tenant `a`. */
async function credentialFor(op: Operation, a: Account): Promise<string | undefined> {
  if (op.access === 'public') return undefined;
  if (op.access === 'operator') return ADMIN;
  if (op.access !== 'llm:use') return a.accessToken;
  if (!keysOf.has(a.tenantId)) keysOf.set(a.tenantId, await createKey(api, a.accessToken));
  return keysOf.get(a.tenantId)!.key;
}

describe('API6 business flows: credits', () => {
  it.each([
    ['negative', -100],
    ['zero', 0],
    ['over the maximum', 10_000_001],
    ['2^53', 2 ** 53],
    ['1e308', 1e308],
    ['fractional', 1.5],
    ['a tenth', 0.1],
    ['a numeric string', '100'],
    ['null', null],
    ['true', true],
    ['an array', [100]],
    ['an object', { $gt: 0 }],
  ])('refuses a purchase of %s credits with 400 on credits, charging nothing', async (_label, credits) => {
    const a = await tenant('Buyer');
    await eventually(async () => (await balanceOf(a)) === 1000);
    const res = await api.post('/api/v1/billing/credits/purchase', { credits }, { token: a.accessToken });
    totals.cases++;
    const fields = expectError(res, 400, 'VALIDATION_ERROR').details.fields as Array<{ field: string }>;
    expect(fields.length).toBeGreaterThan(0);
    expect(fields.every((f) => f.field === 'credits')).toBe(true);
    expect(await balanceOf(a)).toBe(1000);
    expect((await api.get('/api/v1/billing/invoices', { token: a.accessToken })).body.data).toEqual([]);
  });

  it('refuses fields that would set the outcome (balance, price, provider, tenant) instead of ignoring them', async () => {
    const a = await tenant('Assigner');
    const other = await tenant('Assigned');
    for (const extra of [{ balance: 1e9 }, { amountCents: 0 }, { provider: 'free' }, { status: 'paid' }, { tenantId: other.tenantId }]) {
      const res = await api.post('/api/v1/billing/credits/purchase', { credits: 10, ...extra }, { token: a.accessToken });
      totals.cases++;
      expectError(res, 400, 'VALIDATION_ERROR');
    }
    expect(await balanceOf(a)).toBe(1000);
    expect(await balanceOf(other)).toBe(1000);
  });

  it('Idempotency-Key: another body or another operation is 422 on every billing POST; another tenant is its own request', async () => {
    const a = await tenant('Replayer');
    const b = await tenant('Bystander');
    const minted = (await api.post('/api/v1/admin/gift-cards', { credits: 40, count: 2 }, { token: ADMIN })).body.data.codes as string[];
    const key = { 'idempotency-key': unique('idem') };
    const as = (who: Account, headers = key) => ({ token: who.accessToken, headers });
    const reused = (res: Res) => expect(expectError(res, 422, 'UNPROCESSABLE_ENTITY').details.reason).toBe('idempotency_key_reused');

    const first = await api.post('/api/v1/billing/credits/purchase', { credits: 25 }, as(a));
    expect(first.body.data).toMatchObject({ creditsAdded: 25, balance: 1025 });
    // Same key, other body: refused, and not charged.
    reused(await api.post('/api/v1/billing/credits/purchase', { credits: 2500 }, as(a)));
    // Same key on another operation: refused too (CONTRACT.md 14: a key names one request of the tenant), never the
    // purchase's answer replayed as something else.
    reused(await api.post('/api/v1/billing/subscription/create', { plan: 'starter' }, as(a)));
    const other = { 'idempotency-key': unique('idem') };
    const subscribed = await api.post('/api/v1/billing/subscription/create', { plan: 'starter' }, as(a, other));
    expect(subscribed.status).toBe(200);
    expect(subscribed.body.data.invoice).toMatchObject({ kind: 'subscription', plan: 'starter' });
    reused(await api.post('/api/v1/billing/subscription/create', { plan: 'growth' }, as(a, other)));
    const third = { 'idempotency-key': unique('idem') };
    const redeemed = await api.post('/api/v1/billing/gift-cards/redeem', { code: minted[0] }, as(a, third));
    expect(redeemed.body.data).toMatchObject({ creditsAdded: 40 });
    reused(await api.post('/api/v1/billing/gift-cards/redeem', { code: minted[1] }, as(a, third)));
    // The second card was not spent by the refused request: anyone can still redeem it.
    expect((await api.post('/api/v1/billing/gift-cards/redeem', { code: minted[1] }, { token: b.accessToken })).status).toBe(200);
    expect(await balanceOf(a)).toBe(1065);

    // Another tenant with the same key and the same body: its own purchase, its own invoice, its own balance.
    const theirs = await api.post('/api/v1/billing/credits/purchase', { credits: 25 }, as(b));
    expect(theirs.status).toBe(200);
    expect(theirs.body.data.invoice.id).not.toBe(first.body.data.invoice.id);
    expect(theirs.body.data.balance).toBe(1000 + 40 + 25);
    expect(await balanceOf(a)).toBe(1065);
    totals.cases += 7;
  });

  it('redeems only for the caller: a tenant in the body is refused, X-Tenant-ID is ignored', async () => {
    const a = await tenant('Giver');
    const b = await tenant('Receiver');
    const [code] = (await api.post('/api/v1/admin/gift-cards', { credits: 70, count: 1 }, { token: ADMIN })).body.data.codes as string[];
    expectError(
      await api.post('/api/v1/billing/gift-cards/redeem', { code, tenantId: b.tenantId }, { token: a.accessToken }),
      400,
      'VALIDATION_ERROR',
    );
    const res = await api.post(
      '/api/v1/billing/gift-cards/redeem',
      { code },
      { token: a.accessToken, headers: { 'x-tenant-id': b.tenantId } },
    );
    expect(res.body.data).toMatchObject({ creditsAdded: 70, balance: 1070 });
    expect(await balanceOf(b)).toBe(1000);
    totals.cases += 2;
  });

  it('gift-card guessing learns nothing and is rate limited; the guessed card stays redeemable by its owner', async () => {
    const guesser = await tenant('Guesser');
    const probe = (await createKey(api, guesser.accessToken)).key; // its own count, to look at the balance afterwards
    const [code] = (await api.post('/api/v1/admin/gift-cards', { credits: 30, count: 1 }, { token: ADMIN })).body.data.codes as string[];
    // Near misses (one character off the real code) and far ones must look exactly alike.
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
    const near = (i: number) => {
      const at = 5 + (i % 20) + Math.floor((i % 20) / 5); // a position past "GIFT-", skipping the dashes
      const swapped = alphabet[(alphabet.indexOf(code[at]) + 1 + Math.floor(i / 20)) % alphabet.length];
      return code.slice(0, at) + swapped + code.slice(at + 1);
    };
    const guess = (i: number) => (i % 2 ? near(i) : `GIFT-${unique('x').slice(2, 22).toUpperCase()}`);
    // Until the limit answers: within 2 x RATE_LIMIT + 1 guesses even if a window boundary falls in between.
    const answers: Array<{ guess: string; res: Res }> = [];
    for (let i = 0; i <= 2 * RATE_LIMIT && answers.at(-1)?.res.status !== 429; i++) {
      const g = guess(i);
      answers.push({ guess: g, res: await api.post('/api/v1/billing/gift-cards/redeem', { code: g }, { token: guesser.accessToken }) });
    }
    totals.cases += answers.length;
    const limited = answers.at(-1)!.res;
    expectError(limited, 429, 'RATE_LIMIT_EXCEEDED');
    expect(limited.headers.get('retry-after')).toMatch(/^\d+$/);
    const messages = new Set<string>();
    for (const { guess: g, res } of answers.slice(0, -1)) {
      const error = expectError(res, 404, 'RESOURCE_NOT_FOUND');
      expect(error.details).toEqual({ resource: 'gift_card', id: g });
      messages.add(error.message);
    }
    expect(messages.size).toBe(1);
    // The route counts like any other (one request went to making the probe key): no more, no less.
    expect(answers.length).toBeGreaterThanOrEqual(RATE_LIMIT);
    expect((await api.get('/api/v1/billing/summary', { token: probe })).body.data.credits.balance).toBe(1000);
    const owner = await tenant('Card owner');
    expect((await api.post('/api/v1/billing/gift-cards/redeem', { code }, { token: owner.accessToken })).body.data).toMatchObject({
      creditsAdded: 30,
    });
  });
});

describe('API4 unrestricted consumption', () => {
  it('refuses a page size over 100 (or under 1) on every list operation', async () => {
    const a = await tenant('Pager');
    const ids = await seedTargets(api, a);
    const lists = ops.filter((op) => op.method === 'GET' && op.query.some((q) => q.name === 'limit'));
    expect(lists.length).toBeGreaterThan(8);
    totals.lists = lists.length;
    const failures: string[] = [];
    for (const op of lists) {
      const token = await credentialFor(op, a);
      const ok = await api.get(pathFor(op, ids, '?limit=100'), { token });
      if (ok.status !== 200) failures.push(`${op.operationId} limit=100: ${ok.status}`);
      for (const limit of ['101', '1000', '0', '-1']) {
        const res = await api.get(pathFor(op, ids, `?limit=${limit}`), { token });
        totals.cases++;
        if (res.status !== 400 || res.body?.error?.details?.fields?.[0]?.field !== 'limit')
          failures.push(`${op.operationId} limit=${limit}: ${res.status} ${res.text.slice(0, 120)}`);
      }
    }
    expect(failures).toEqual([]);
  });

  it('answers 413 to a body over 1 MiB on every operation that takes a body, and changes nothing', async () => {
    const a = await tenant('Heavy');
    const ids = await seedTargets(api, a);
    // The key the /v1 operations are sent with exists before the snapshot; its last use changes by design.
    await credentialFor({ access: 'llm:use' } as Operation, a);
    const used = [keysOf.get(a.tenantId)!.id];
    const before = await tenantSnapshot(api, a, ids, used);
    const withBody = ops.filter((op) => op.body);
    expect(withBody.length).toBeGreaterThan(30);
    totals.bodies = withBody.length;
    const huge = JSON.stringify({ name: 'x'.repeat(1024 * 1024) });
    const failures: string[] = [];
    for (const op of withBody) {
      const res = await api.request(op.method, pathFor(op, ids), {
        token: await credentialFor(op, a),
        raw: huge,
        headers: { 'content-type': 'application/json' },
      });
      totals.cases++;
      // The OpenAI-compatible API names it in OpenAI's shape (code in lower case).
      if (res.status !== 413 || String(res.body?.error?.code).toUpperCase() !== 'PAYLOAD_TOO_LARGE')
        failures.push(`${op.operationId}: ${res.status} ${res.text.slice(0, 120)}`);
    }
    expect(failures).toEqual([]);
    expect(await tenantSnapshot(api, a, ids, used)).toEqual(before);
  });
});

describe('API3 and API8: secrets never leave', () => {
  let s3: LocalS3;
  let llm: FakeProviderServer;
  let receiver: Receiver;
  let mcp: TestMcpServer;
  let keeper: Account;
  let keeperKey: string;
  let ids: Record<string, string>;

  beforeAll(async () => {
    const llmKey = remember('LLM apiKey', unique('sk-owasp'));
    [s3, llm, receiver, mcp] = await Promise.all([startS3(), startFakeOpenAI({ apiKey: llmKey }), startReceiver(), startTestMcpServer()]);
    keeper = await tenant('Keeper');
    const t = { token: keeper.accessToken };
    ids = await seedTargets(api, keeper);
    ids['api-keys:id'] = ids.keyId;
    remember('seeded secret value', 'fuzz-value');
    remember('seeded webhook secret', 'whsec-fuzz-target');
    // The detector finds a secret where it is meant to be: the one answer that shows an API key, its creation.
    const created = await api.post('/api/v1/api-keys', { name: 'probe', type: 'sdk', environment: 'development' }, t);
    keeperKey = remember('API key', created.body.data.key);
    expect(leaked(created.text)).toEqual(['API key']);

    // A member with a password, and a sign-in with a wrong one.
    const memberPassword = remember('member password', unique('member-pass'));
    await api.post(
      '/api/v1/tenant/team/members',
      { email: `${unique('m')}@example.com`, name: 'M', role: 'member', password: memberPassword },
      t,
    );
    const wrong = remember('wrong password', unique('wrong-pass'));
    expect((await api.post('/api/v1/auth/login', { email: keeper.email, password: wrong })).status).toBe(401);

    // A refresh token rotated, then replayed (identity logs the reuse and revokes the session).
    const login = (await api.post('/api/v1/auth/login', { email: keeper.email, password: keeper.password })).body.data;
    remember('second access token', login.accessToken);
    const rotated = (await api.post('/api/v1/auth/refresh', { refreshToken: remember('refresh token', login.refreshToken) })).body.data;
    remember('rotated refresh token', rotated.refreshToken);
    expect((await api.post('/api/v1/auth/refresh', { refreshToken: login.refreshToken })).status).toBe(401);

    // Secrets: created, then a new version.
    ids.name = 'OWASP_SECRET';
    const v1 = remember('secret value v1', unique('secret-v1'));
    expect((await api.post('/api/v1/secrets', { name: 'OWASP_SECRET', value: v1, description: 'probe' }, t)).status).toBe(201);
    expect((await api.put('/api/v1/secrets/OWASP_SECRET', { value: remember('secret value v2', unique('secret-v2')) }, t)).status).toBe(
      200,
    );

    // An MCP server whose bearer token is that secret (its value is read at each connection, never stored).
    const server = await api.post(
      '/api/v1/mcp-servers',
      { name: 'probe', url: mcp.url, auth: { type: 'bearer', secret: 'OWASP_SECRET' } },
      t,
    );
    expect(server.body.data.status).toBe('ready');
    ids['mcp-servers:id'] = server.body.data.id;

    // A webhook: created with a secret, tested (the secret signs a delivery), re-keyed, tested against a failing receiver.
    const hook = await api.post(
      '/api/v1/webhooks',
      { url: `${receiver.url}/hook`, events: ['project.created'], secret: remember('webhook secret', unique('whsec')) },
      t,
    );
    expect(hook.status).toBe(201);
    ids['webhooks:id'] = hook.body.data.id;
    ids.deliveryId = (await api.post(`/api/v1/webhooks/${hook.body.data.id}/test`, undefined, t)).body.data.id;
    await eventually(async () => receiver.at('/hook').length >= 1, 10_000, 200);
    const rekeyed = await api.patch(
      `/api/v1/webhooks/${hook.body.data.id}`,
      { secret: remember('webhook secret v2', unique('whsec2')) },
      t,
    );
    expect(rekeyed.status).toBe(200);
    receiver.answer = () => ({ status: 500, body: 'no' });
    await api.post(`/api/v1/webhooks/${hook.body.data.id}/test`, undefined, t);
    await eventually(async () => receiver.at('/hook').length >= 2, 10_000, 200);

    // The LLM key: a wrong one first (the provider refuses it), then the right one for a chat reply and a run.
    const settings = (apiKey: string) =>
      api.patch('/api/v1/tenant/settings/llm', { provider: 'openai', model: 'gpt-test', baseUrl: llm.url, apiKey }, t);
    expect((await settings(remember('wrong LLM apiKey', unique('sk-wrong')))).status).toBe(200);
    const session = (await api.post('/api/v1/chat/sessions', { title: 'probe' }, t)).body.data.id;
    ids['chat:id'] = session;
    expect((await api.post(`/api/v1/chat/sessions/${session}/messages`, { content: 'first' }, t)).status).toBe(202);
    const replies = async (status: string) =>
      (await api.get(`/api/v1/chat/sessions/${session}/messages`, t)).body.data.filter(
        (m: { role: string; status: string }) => m.role === 'assistant' && m.status === status,
      ).length;
    await eventually(async () => (await replies('failed')) === 1, 15_000, 250);
    expect((await settings(llmKey)).status).toBe(200);
    expect((await api.post(`/api/v1/chat/sessions/${session}/messages`, { content: 'second' }, t)).status).toBe(202);
    await eventually(async () => (await replies('completed')) === 1, 15_000, 250);
    // And a response of the OpenAI-compatible API, with the tenant's key.
    const response = await api.post('/v1/responses', { model: 'gpt-test', input: 'probe' }, { token: keeperKey });
    expect(response.body.status).toBe('completed');
    ids['responses:id'] = response.body.id;
    // A catalogue entry with its own key (write-only), and the request log's entry of a call.
    const model = await api.post(
      '/api/v1/models',
      { name: 'owasp-model', provider: 'openai-compatible', baseUrl: llm.url, apiKey: remember('model apiKey', unique('sk-model')) },
      t,
    );
    expect(model.status).toBe(201);
    ids['models:id'] = model.body.data.id;
    const window = `from=${new Date(Date.now() - 3_600_000).toISOString()}&to=${new Date(Date.now() + 3_600_000).toISOString()}`;
    const logged = async () => (await api.get(`/api/v1/requests?${window}`, t)).body.data ?? [];
    await eventually(async () => (await logged()).length > 0, 15_000, 250);
    ids['requests:id'] = (await logged())[0].id;
    const agent = (await api.post('/api/v1/agents', { name: 'probe', systemPrompt: 'p', config: { autonomyLevel: 'manual' } }, t)).body.data
      .id;
    ids['agents:id'] = agent;
    const run = (await api.post(`/api/v1/agents/${agent}/execute`, { goal: 'say hi', projectId: ids.id }, t)).body.data.id;
    ids.run_id = run;
    await eventually(async () => (await api.get(`/api/v1/agents/${agent}/runs/${run}`, t)).body.data.status === 'completed', 15_000, 250);
    // A run that calls the MCP server's tool: the bearer secret is read and sent at call time.
    const toolAgent = (
      await api.post(
        '/api/v1/agents',
        { name: 'mcp probe', config: { autonomyLevel: 'autonomous', tools: [{ serverId: ids['mcp-servers:id'], allow: ['lookup'] }] } },
        t,
      )
    ).body.data.id;
    llm.script({ type: 'tool_calls', toolCalls: [{ name: 'lookup', arguments: { q: 'probe' } }] }, { type: 'text', text: 'ok' });
    const toolRun = (await api.post(`/api/v1/agents/${toolAgent}/execute`, { goal: 'look it up', projectId: ids.id }, t)).body.data.id;
    await eventually(
      async () => (await api.get(`/api/v1/agents/${toolAgent}/runs/${toolRun}`, t)).body.data.status === 'completed',
      15_000,
      250,
    );
    expect(mcp.calls.map((c) => c.tool)).toEqual(['lookup']);

    // BYOS keys: saved, then validated against a real S3 API that refuses them; and a config validated unsaved.
    const storage = `/api/v1/regions/storage/${keeper.tenantId}`;
    const byos = (access: string, secret: string) => ({
      storageMode: 'byos',
      byosProvider: 's3',
      byosEndpoint: s3.endpoint,
      byosBucket: s3.bucket,
      byosRegion: 'us-east-1',
      byosAccessKey: access,
      byosSecretKey: secret,
    });
    const saved = byos(remember('BYOS access key', `AKIA${unique('o').toUpperCase()}`), remember('BYOS secret key', unique('byos')));
    expect((await api.put(storage, saved, t)).status).toBe(200);
    expect((await api.post(`${storage}/validate`, undefined, t)).body.data.valid).toBe(false);
    const unsaved = byos(
      remember('unsaved BYOS access key', `AKIA${unique('u').toUpperCase()}`),
      remember('unsaved BYOS secret', unique('byos-u')),
    );
    expect((await api.post(`${storage}/validate`, unsaved, t)).body.data.valid).toBe(false);

    // A key that is revoked, then used.
    const revoked = await createKey(api, keeper.accessToken);
    remember('revoked API key', revoked.key);
    await api.del(`/api/v1/api-keys/${revoked.id}`, t);
    await eventually(async () => (await api.get('/api/v1/tenant', { token: revoked.key })).status === 401, 3000, 200);
  });
  afterAll(async () => {
    await Promise.all([s3?.stop(), llm?.close(), receiver?.close(), mcp?.close()]);
  });

  it('the provider got the LLM key and the receiver a signature: the secrets were really used', () => {
    expect(llm.requests.some((r) => r.headers.authorization === `Bearer ${handedOver.get('LLM apiKey')}`)).toBe(true);
    expect(receiver.at('/hook').every((r) => typeof r.headers['webhook-signature'] === 'string')).toBe(true);
    expect(mcp.authorizations).toContain(`Bearer ${handedOver.get('secret value v2')}`);
  });

  /** A read's query: the largest page, and a value for every required parameter (a window of time: the last day). */
  function readQuery(op: (typeof ops)[number]): string {
    const known: Record<string, string> = {
      limit: '100',
      from: new Date(Date.now() - 86_400_000).toISOString(),
      to: new Date(Date.now() + 3_600_000).toISOString(),
    };
    const names = op.query.filter((q) => q.required || q.name === 'limit').map((q) => q.name);
    const unknown = names.filter((n) => !(n in known));
    if (unknown.length) throw new Error(`${op.operationId} requires query ${unknown.join(', ')}: give the sweep a value for it`);
    return names.length ? `?${new URLSearchParams(names.map((n): [string, string] => [n, known[n]])).toString()}` : '';
  }

  it('answers no read route of the tenant with a secret it was given', async () => {
    const reads = ops.filter((op) => op.method === 'GET' && op.access !== 'public' && op.access !== 'operator');
    const sweep = reads.filter((op) => !streams.has(`GET ${op.path}`));
    expect(sweep.length).toBeGreaterThan(25);
    totals.reads = sweep.length;
    const failures: string[] = [];
    let answered = 0;
    for (const op of sweep) {
      const query = readQuery(op);
      for (const token of [keeper.accessToken, keeperKey]) {
        if (op.access === 'llm:use' && token === keeper.accessToken) continue; // /v1: API keys only
        const res = await api.get(pathFor(op, ids, query), { token });
        totals.cases++;
        if (res.status === 200) answered++;
        else if (!(res.status === 403 && token === keeperKey)) failures.push(`${op.operationId}: ${res.status} ${res.text.slice(0, 120)}`);
        for (const label of leaked(res.text)) failures.push(`${op.operationId} shows the ${label}`);
      }
    }
    expect(failures).toEqual([]);
    expect(answered).toBeGreaterThan(sweep.length); // most reads answered for both credentials: a sweep of real data
  });

  it('writes none of them to any log line (passwords, API keys, tokens, secret values, webhook, LLM and BYOS keys)', async () => {
    await new Promise((r) => setTimeout(r, 500)); // the last lines of the background work
    const output = system.output();
    // The capture works: the lines of the failures provoked above (a refused model call, a replayed refresh token).
    expect(output).toMatch(/"service":"chat".*"msg":"reply failed"/);
    expect(output).toMatch(/"service":"identity".*"msg":"refresh token reused; session revoked"/);
    expect(leaked(output)).toEqual([]);
    totals.cases += handedOver.size;
  });
});
