import { client, createKey, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

let stack: Stack;
let api: Client;
let owner: Account;

beforeAll(async () => {
  stack = await startStack();
  api = client(stack.url);
  owner = await signUp(api, 'Agents');
});
afterAll(() => stack.stop());

const A = '/api/v1/agents';

describe('agents CRUD', () => {
  it('creates with defaults, reads, updates (config merges) and deletes an agent', async () => {
    const created = await api.post(A, { name: ' Helper ', systemPrompt: 'You help with projects.' }, { token: owner.accessToken });
    expect(created.status).toBe(201);
    const a = created.body.data;
    expect(a).toEqual({
      id: expect.stringMatching(/^agt_/),
      name: 'Helper',
      systemPrompt: 'You help with projects.',
      config: { autonomyLevel: 'supervised', maxSteps: 10, timeBudgetSeconds: 300, model: null, temperature: null, tools: [] },
      createdAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      updatedAt: a.createdAt,
    });
    expect((await api.get(`${A}/${a.id}`, { token: owner.accessToken })).body.data).toEqual(a);

    const patched = await api.patch(
      `${A}/${a.id}`,
      { config: { autonomyLevel: 'autonomous', model: 'gpt-4.1-mini', temperature: 0.3 } },
      { token: owner.accessToken },
    );
    expect(patched.status).toBe(200);
    expect(patched.body.data).toMatchObject({
      name: 'Helper',
      systemPrompt: 'You help with projects.',
      config: { autonomyLevel: 'autonomous', maxSteps: 10, timeBudgetSeconds: 300, model: 'gpt-4.1-mini', temperature: 0.3 },
    });
    const cleared = await api.patch(
      `${A}/${a.id}`,
      { name: 'Renamed', config: { model: null, temperature: null, maxSteps: 3 } },
      { token: owner.accessToken },
    );
    expect(cleared.body.data).toMatchObject({
      name: 'Renamed',
      config: { autonomyLevel: 'autonomous', maxSteps: 3, model: null, temperature: null },
    });

    const del = await api.del(`${A}/${a.id}`, { token: owner.accessToken });
    expect(del.status).toBe(200);
    expect(del.body.data).toEqual({ id: a.id, deleted: true });
    const gone = expectError(await api.get(`${A}/${a.id}`, { token: owner.accessToken }), 404, 'RESOURCE_NOT_FOUND');
    expect(gone.details).toEqual({ resource: 'agent', id: a.id });
  });

  it('accepts every autonomy level and lists newest first with cursor pagination', async () => {
    const t = await signUp(api, 'AgentLister');
    const ids: string[] = [];
    for (const level of ['manual', 'supervised', 'autonomous', 'manual', 'supervised']) {
      const res = await api.post(A, { name: level, config: { autonomyLevel: level } }, { token: t.accessToken });
      expect(res.body.data.config.autonomyLevel).toBe(level);
      ids.push(res.body.data.id);
    }
    const first = await api.get(`${A}?limit=2`, { token: t.accessToken });
    expect(first.body.meta.pagination).toEqual({ limit: 2, next_cursor: expect.any(String), has_more: true });
    const seen: string[] = first.body.data.map((x: { id: string }) => x.id);
    let cursor: string | null = first.body.meta.pagination.next_cursor;
    while (cursor) {
      const page = await api.get(`${A}?limit=2&cursor=${encodeURIComponent(cursor)}`, { token: t.accessToken });
      seen.push(...page.body.data.map((x: { id: string }) => x.id));
      cursor = page.body.meta.pagination.next_cursor;
    }
    expect(seen).toEqual([...ids].reverse());
  });

  it.each([
    ['a missing name', { systemPrompt: 'x' }],
    ['a blank name', { name: '   ' }],
    ['a name too long', { name: 'n'.repeat(201) }],
    ['a number for a name', { name: 42 }],
    ['an unknown field', { name: 'x', tenantId: 'ten_other' }],
    ['an unknown config field', { name: 'x', config: { autonomyLevel: 'manual', tools: ['rm'] } }],
    ['a bad autonomyLevel', { name: 'x', config: { autonomyLevel: 'yolo' } }],
    ['an autonomyLevel of the wrong type', { name: 'x', config: { autonomyLevel: 1 } }],
    ['maxSteps out of range', { name: 'x', config: { maxSteps: 0 } }],
    ['maxSteps not an integer', { name: 'x', config: { maxSteps: 2.5 } }],
    ['a temperature over 2', { name: 'x', config: { temperature: 3 } }],
    ['a config that is not an object', { name: 'x', config: 'autonomous' }],
    ['a system prompt too long', { name: 'x', systemPrompt: 's'.repeat(20_001) }],
  ])('refuses %s with 400', async (_what, body) => {
    expectError(await api.post(A, body, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
  });

  it('refuses bad updates with 400 and keeps the agent as it was', async () => {
    const a = (await api.post(A, { name: 'steady' }, { token: owner.accessToken })).body.data;
    const bad = expectError(
      await api.patch(`${A}/${a.id}`, { config: { autonomyLevel: 'reckless' } }, { token: owner.accessToken }),
      400,
      'VALIDATION_ERROR',
    );
    expect(bad.details.fields[0].field).toMatch(/autonomyLevel/);
    expectError(await api.patch(`${A}/${a.id}`, { name: null }, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
    expectError(await api.patch(`${A}/${a.id}`, { id: 'agt_other' }, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
    expectError(await api.get(`${A}?limit=101`, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
    expectError(await api.get(`${A}?cursor=garbage`, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
    expect((await api.get(`${A}/${a.id}`, { token: owner.accessToken })).body.data).toEqual(a);
  });
});

describe('agents access', () => {
  it('another tenant gets 404 for every route and never sees the agent', async () => {
    const mine = (await api.post(A, { name: 'private', systemPrompt: 'secret instructions' }, { token: owner.accessToken })).body.data;
    const other = await signUp(api, 'OtherAgents');
    for (const res of [
      await api.get(`${A}/${mine.id}`, { token: other.accessToken }),
      await api.patch(`${A}/${mine.id}`, { name: 'hijack' }, { token: other.accessToken }),
      await api.del(`${A}/${mine.id}`, { token: other.accessToken }),
    ]) {
      expect(expectError(res, 404, 'RESOURCE_NOT_FOUND').details).toEqual({ resource: 'agent', id: mine.id });
    }
    const list = await api.get(A, { token: other.accessToken, headers: { 'x-tenant-id': owner.tenantId } });
    expect(list.body.data).toEqual([]);
    expect((await api.get(`${A}/${mine.id}`, { token: owner.accessToken })).body.data.name).toBe('private');
  });

  it('enforces agents:read and agents:write', async () => {
    const reader = await createKey(api, owner.accessToken, { scopes: ['agents:read'] });
    const writer = await createKey(api, owner.accessToken, { scopes: ['agents:write'] });
    const projectsOnly = await createKey(api, owner.accessToken, { scopes: ['projects:read', 'projects:write'] });
    expect((await api.get(A, { token: reader.key })).status).toBe(200);
    expect(expectError(await api.post(A, { name: 'x' }, { token: reader.key }), 403, 'FORBIDDEN').details.requiredScope).toBe(
      'agents:write',
    );
    const made = await api.post(A, { name: 'by writer' }, { token: writer.key });
    expect(made.status).toBe(201);
    expectError(await api.get(A, { token: writer.key }), 403, 'FORBIDDEN');
    expectError(await api.del(`${A}/${made.body.data.id}`, { token: reader.key }), 403, 'FORBIDDEN');
    expectError(await api.get(A, { token: projectsOnly.key }), 403, 'FORBIDDEN');
    expectError(await api.get(A), 401, 'UNAUTHORIZED');
  });
});
