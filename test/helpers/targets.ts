import { createKey, eventually, type Account, type Client } from './http';
import type { Operation } from './openapi';

/**
 * One of each resource a tenant can have, for suites that aim bad requests at real ids: keyed by path parameter
 * name, or `<first path segment>:<name>` where the name is shared (`agents:id`, `webhooks:id`, `chat:id`).
 */
export async function seedTargets(api: Client, owner: Account): Promise<Record<string, string>> {
  const t = { token: owner.accessToken };
  const ids: Record<string, string> = {};
  ids.id = (await api.post('/api/v1/projects', { name: 'target' }, t)).body.data.id;
  ids.keyId = (await createKey(api, owner.accessToken)).id;
  const member = await api.post(
    '/api/v1/tenant/team/members',
    { email: `fz${Date.now()}${Math.random()}@example.com`, name: 'F', role: 'member', password: 'password123' },
    t,
  );
  ids.userId = member.body.data.userId;
  ids['agents:id'] = (await api.post('/api/v1/agents', { name: 'target', systemPrompt: 'p', config: {} }, t)).body.data.id;
  // No run exists (that needs a model): bad values in the other parameters still meet a real agent.
  ids.run_id = 'run_none';
  // A closed port on loopback: the suites that use this allow private egress.
  const hook = { url: 'http://127.0.0.1:9/hook', events: ['project.deleted'], secret: 'whsec-fuzz-target' };
  ids['webhooks:id'] = (await api.post('/api/v1/webhooks', hook, t)).body.data.id;
  ids.deliveryId = 'dlv_none';
  ids['chat:id'] = (await api.post('/api/v1/chat/sessions', { title: 'target' }, t)).body.data.id;
  // No response exists (that needs a model): the OpenAI-compatible routes meet an id of the right shape.
  ids['responses:id'] = 'resp_none';
  ids.tenantId = owner.tenantId;
  ids.featureKey = 'agents';
  ids.provider = 'acme'; // an OAuth provider name (none configured here: its routes answer 404)
  ids.name = (await api.post('/api/v1/secrets', { name: 'FUZZ_TARGET', value: 'fuzz-value' }, t)).body.data.name;
  await api.put('/api/v1/tenant/security/network', { ipAllowlist: ['127.0.0.1'] }, t);
  await api.patch('/api/v1/tenant/settings/llm', { provider: 'openai', model: 'gpt-test' }, t);
  // An event of the tenant's log (its own tenant.created), once the bus has brought it there.
  const created = () => api.get('/api/v1/events?type=tenant.created', t);
  await eventually(async () => (await created()).body.data.length === 1, 10_000);
  ids['events:id'] = (await created()).body.data[0].id;
  return ids;
}

/** The value of a path parameter that names a real resource of the caller. */
export const realParam = (ids: Record<string, string>, op: Operation, name: string) =>
  ids[`${op.path.split('/')[op.path.startsWith('/v1/') ? 2 : 3]}:${name}`] ?? ids[name] ?? 'x';

/** The OpenAI-compatible API (/v1): API keys only, errors in OpenAI's shape. */
export const isOpenAiOp = (op: { path: string }) => op.path.startsWith('/v1/');

/**
 * Everything a bad request could have changed, read through the API. `usedKeyIds`: keys the suite sends its requests
 * with (the OpenAI-compatible API takes only keys), whose last use and request count change by design.
 */
export async function tenantSnapshot(api: Client, owner: Account, ids: Record<string, string>, usedKeyIds: string[] = []) {
  const get = async (p: string) => (await api.get(p, { token: owner.accessToken })).body.data;
  return {
    tenant: await get('/api/v1/tenant'),
    projects: await get('/api/v1/projects?limit=100'),
    keys: ((await get('/api/v1/api-keys?limit=100')) as Array<{ id: string }>).filter((k) => !usedKeyIds.includes(k.id)),
    members: await get('/api/v1/tenant/team/members?limit=100'),
    network: await get('/api/v1/tenant/security/network'),
    llm: await get('/api/v1/tenant/settings/llm'),
    agents: await get('/api/v1/agents?limit=100'),
    webhooks: await get('/api/v1/webhooks?limit=100'),
    chatSessions: await get('/api/v1/chat/sessions?limit=100'),
    chatMessages: await get(`/api/v1/chat/sessions/${ids['chat:id']}/messages?limit=100`),
    preferences: await get(`/api/v1/regions/preferences/${owner.tenantId}`),
    storage: await get(`/api/v1/regions/storage/${owner.tenantId}`),
    secrets: await get('/api/v1/secrets?limit=100'),
    billing: await get('/api/v1/billing/summary'),
  };
}
