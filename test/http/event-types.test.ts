import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import Ajv2020 from 'ajv/dist/2020';
import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startReceiver, verifyWithStandardWebhooks, type Received, type Receiver } from '../helpers/receiver';
import { startStack, type Stack } from '../helpers/stack';

// The event catalogue (CONTRACT.md 10): GET /event-types lists every type a webhook can subscribe to, each with a JSON
// Schema (draft 2020-12) of its `data` generated from the protobuf message that defines it. Then a real event of
// every type in the catalogue is made through the API (one of them by a stand-in producer), and every body delivered
// to a webhook subscribed to all of them, and every body GET /events shows, validates against its type's schema.
jest.setTimeout(90_000);

const ADMIN = 'operator-token-for-event-types-0123';
const SECRET = 'whsec-event-types-secret';
const DRAFT_2020 = 'https://json-schema.org/draft/2020-12/schema';
let stack: Stack;
let api: Client;
let openai: FakeProviderServer;
let receiver: Receiver;

beforeAll(async () => {
  openai = await startFakeOpenAI();
  openai.setDefault(() => ({ type: 'text', text: 'Done.', chunks: 2, usage: { inputTokens: 50, outputTokens: 40 } }));
  [stack, receiver] = await Promise.all([
    startStack({
      env: {
        SVC_ADMIN_TOKEN: ADMIN,
        EGRESS_ALLOW_PRIVATE: 'true',
        WEBHOOK_RETRY_SCHEDULE: '0.2,0.2',
        WEBHOOK_TIMEOUT_MS: '2000',
        AGENTS_POLL_MS: '50',
      },
    }),
    startReceiver(),
  ]);
  api = client(stack.url);
  receiver.answer = (r) => (r.path === '/flaky' ? { status: 503, body: 'down' } : { status: 204 });
});
afterAll(async () => {
  await receiver.close();
  await stack.stop();
  await openai.close();
});

interface EventType {
  type: string;
  description: string;
  version: number;
  schema: Record<string, any>;
}

async function catalogue(token: string): Promise<EventType[]> {
  const res = await api.get('/api/v1/event-types', { token });
  expect(res.status).toBe(200);
  expect(res.body.meta.pagination).toBeUndefined(); // not paginated
  return res.body.data;
}

describe('GET /event-types', () => {
  it('lists every public type with a description, an integer version and a 2020-12 schema that compiles', async () => {
    const owner = await signUp(api, 'Catalogue');
    const key = await createKey(api, owner.accessToken, { scopes: ['events:read'] });
    const types = await catalogue(key.key);
    const names = types.map((t) => t.type);
    expect(names).toEqual(
      expect.arrayContaining([
        'project.created',
        'project.updated',
        'project.deleted',
        'agent.started',
        'agent.completed',
        'agent.failed',
        'tenant.created',
        'user.created',
        'billing.threshold_crossed',
        'webhook.endpoint_disabled',
        'webhook.endpoint_recovered',
        'audit.entry_created',
      ]),
    );
    expect(names).not.toContain('webhook.test');
    expect(new Set(names).size).toBe(names.length);
    const ajv = new Ajv2020({ strict: true, allErrors: true });
    for (const t of types) {
      expect(Object.keys(t).sort()).toEqual(['description', 'schema', 'type', 'version']);
      expect(t.description.length).toBeGreaterThan(10);
      expect(Number.isInteger(t.version) && t.version >= 1).toBe(true);
      expect(t.schema.$schema).toBe(DRAFT_2020);
      expect(t.schema).toMatchObject({ type: 'object', additionalProperties: false });
      expect(() => ajv.compile(t.schema)).not.toThrow();
    }
    // The catalogue is what a webhook may subscribe to: all of it is accepted, anything else is a 400.
    const all = await api.post(
      '/api/v1/webhooks',
      { url: `${receiver.url}/x`, events: names, secret: SECRET },
      { token: owner.accessToken },
    );
    expect(all.status).toBe(201);
    expect(all.body.data.events.sort()).toEqual([...names].sort());
    for (const bad of ['webhook.test', 'project.exploded', 'llm.usage', 'tenant.plan_changed']) {
      const res = await api.post(
        '/api/v1/webhooks',
        { url: `${receiver.url}/x`, events: [bad], secret: SECRET },
        { token: owner.accessToken },
      );
      expect(expectError(res, 400, 'VALIDATION_ERROR').details.fields.map((f: { field: string }) => f.field)).toEqual(['events[0]']);
    }
  });

  it('is refused to a key without events:read', async () => {
    const owner = await signUp(api, 'Catalogue scopes');
    const key = await createKey(api, owner.accessToken, { scopes: ['agents:read'] });
    expectError(await api.get('/api/v1/event-types', { token: key.key }), 403, 'FORBIDDEN');
  });
});

describe('a real event of every type validates against its schema', () => {
  let owner: Account;
  let types: EventType[];

  beforeAll(async () => {
    owner = await signUp(api, 'Every type');
    const t = { token: owner.accessToken };
    types = await catalogue(owner.accessToken);
    const hook = await api.post('/api/v1/webhooks', { url: `${receiver.url}/all`, events: types.map((x) => x.type), secret: SECRET }, t);
    expect(hook.status).toBe(201);
    const flaky = await api.post('/api/v1/webhooks', { url: `${receiver.url}/flaky`, events: ['project.created'], secret: SECRET }, t);

    // user.created; project.created, updated and deleted (the last also fails its way to disabling /flaky).
    const member = { email: `m${Date.now()}@example.com`, name: 'Member', role: 'member', password: 'password123' };
    expect((await api.post('/api/v1/tenant/team/members', member, t)).status).toBe(201);
    const project = (await api.post('/api/v1/projects', { name: 'Typed', description: 'd', language: 'ts' }, t)).body.data;
    await api.patch(`/api/v1/projects/${project.id}`, { description: 'changed' }, t);
    const doomed = (await api.post('/api/v1/projects', { name: 'Doomed' }, t)).body.data;
    await api.del(`/api/v1/projects/${doomed.id}`, t);

    // webhook.endpoint_disabled, then webhook.endpoint_recovered when it is enabled again.
    await eventually(async () => (await api.get(`/api/v1/webhooks/${flaky.body.data.id}`, t)).body.data.active === false, 15_000);
    expect((await api.patch(`/api/v1/webhooks/${flaky.body.data.id}`, { active: true }, t)).status).toBe(200);

    // agent.started and agent.completed (a manual run: one model answer), agent.started and agent.failed (cancelled).
    await eventually(async () => (await api.get('/api/v1/billing/summary', t)).body.data.credits.balance === 1000, 10_000);
    const llm = { provider: 'openai', model: 'gpt-fake', baseUrl: openai.url, apiKey: 'sk-event-types-' + 'k'.repeat(32) };
    expect((await api.patch('/api/v1/tenant/settings/llm', llm, t)).status).toBe(200);
    const agent = (await api.post('/api/v1/agents', { name: 'typed', systemPrompt: 'Be brief.', config: { autonomyLevel: 'manual' } }, t))
      .body.data.id;
    const run = (await api.post(`/api/v1/agents/${agent}/execute`, { goal: 'Say done', projectId: project.id }, t)).body.data.id;
    await eventually(async () => (await api.get(`/api/v1/agents/${agent}/runs/${run}`, t)).body.data.status === 'completed', 15_000);
    openai.script({ type: 'hang' });
    const hung = (await api.post(`/api/v1/agents/${agent}/execute`, { goal: 'Take forever', projectId: project.id }, t)).body.data.id;
    await eventually(async () => (await api.get(`/api/v1/agents/${agent}/runs/${hung}`, t)).body.data.status === 'running', 15_000);
    expect((await api.post(`/api/v1/agents/${agent}/runs/${hung}/cancel`, undefined, t)).status).toBe(200);

    // billing.threshold_crossed: the run's usage left the balance under 1,000; the operator takes it under 900.
    expect((await api.put('/api/v1/billing/alerts', { balanceBelow: 900 }, t)).status).toBe(200);
    const adjusted = await api.post(`/api/v1/admin/tenants/${owner.tenantId}/credits`, { delta: -200, reason: 'test' }, { token: ADMIN });
    expect(adjusted.status).toBe(200);

    // audit.entry_created: the audit log's entries of the changes above (member added, LLM settings, the operator's
    // credit adjustment), published as each is chained.

    // Everything delivered: one of each type but tenant.created, which happened before any webhook could exist.
    const deliverable = types.map((x) => x.type).filter((x) => x !== 'tenant.created');
    await eventually(async () => deliverable.every((type) => receiver.at('/all').some((r) => r.json?.type === type)), 30_000, 100);
  });

  it('every delivered body, and every body GET /events shows, of every type', async () => {
    const ajv = new Ajv2020({ strict: true, allErrors: true });
    const validators = new Map(types.map((t) => [t.type, ajv.compile(t.schema)]));
    const stored: Array<{ type: string; data: unknown }> = [];
    let cursor: string | null = null;
    do {
      const res: { body: any } = await api.get(`/api/v1/events?limit=100${cursor ? `&cursor=${cursor}` : ''}`, {
        token: owner.accessToken,
      });
      stored.push(...res.body.data);
      cursor = res.body.meta.pagination.next_cursor;
    } while (cursor);
    const delivered: Received[] = receiver.at('/all');
    const checked = new Map<string, number>();
    const failures: string[] = [];
    for (const body of [...delivered.map((r) => r.json), ...stored]) {
      const validate = validators.get(body.type);
      if (!validate) {
        failures.push(`${body.type}: not in the catalogue`);
        continue;
      }
      if (!validate(body.data)) failures.push(`${body.type}: ${ajv.errorsText(validate.errors)} in ${JSON.stringify(body.data)}`);
      checked.set(body.type, (checked.get(body.type) ?? 0) + 1);
    }
    expect(failures).toEqual([]);
    // Every type of the catalogue was checked on a real body: a new type without an event here fails.
    expect([...checked.keys()].sort()).toEqual(types.map((t) => t.type).sort());
    for (const r of delivered) expect(verifyWithStandardWebhooks(r, SECRET)).toEqual(r.json);
    // What the webhooks got is what the log shows.
    for (const r of delivered) expect(stored.find((e: any) => e.id === r.json.id)).toEqual(r.json);
  });

  it('the schemas are strict: an unknown field, a missing one or a wrong type is invalid', async () => {
    const ajv = new Ajv2020({ strict: true });
    const schemaOf = (type: string) => types.find((t) => t.type === type)!.schema;
    const project = receiver.at('/all').find((r) => r.json.type === 'project.created')!.json.data;
    const validProject = ajv.compile(schemaOf('project.created'));
    expect(validProject(project)).toBe(true);
    expect(validProject({ ...project, extra: 1 })).toBe(false);
    const missing = { ...project };
    delete missing.created_at;
    expect(validProject(missing)).toBe(false);
    expect(validProject({ ...project, name: 42 })).toBe(false);
    const run = receiver.at('/all').find((r) => r.json.type === 'agent.completed')!.json.data;
    const validRun = ajv.compile(schemaOf('agent.completed'));
    expect(run.output).toBe('Done.');
    expect(validRun({ ...run, output: null })).toBe(true); // optional: null or left out
    expect(validRun({ ...run, usage: { inputTokens: 'many', outputTokens: 1 } })).toBe(false);
  });
});
