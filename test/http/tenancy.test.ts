import { client, createKey, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// Every route that takes an id, from the OpenAPI document: another tenant's id is a 404 naming the id (never a
// 403, never the resource), and the resource is left as it was.
let stack: Stack;
let api: Client;
let mine: Account;
let theirs: Account;
/** Ids of `theirs`, by the path parameter that names them (resolved by the route's collection). */
const theirIds: Record<string, string> = {};

beforeAll(async () => {
  stack = await startStack();
  api = client(stack.url);
  mine = await signUp(api, 'Mine');
  theirs = await signUp(api, 'Theirs');
  theirIds['/api/v1/projects'] = (await api.post('/api/v1/projects', { name: 'theirs' }, { token: theirs.accessToken })).body.data.id;
  theirIds['/api/v1/api-keys'] = (await createKey(api, theirs.accessToken)).id;
  theirIds['/api/v1/tenant/team/members'] = (
    await api.post(
      '/api/v1/tenant/team/members',
      { email: `t${Date.now()}@example.com`, name: 'T', role: 'member', password: 'password123' },
      { token: theirs.accessToken },
    )
  ).body.data.userId;
});
afterAll(() => stack.stop());

/** A minimal valid body for routes that take one, so that the id check is what answers. */
const VALID_BODIES: Record<string, unknown> = {
  'PATCH /api/v1/projects/{id}': { name: 'hijacked' },
  'PATCH /api/v1/tenant/team/members/{userId}': { role: 'admin' },
};

it('answers 404 RESOURCE_NOT_FOUND with {resource, id} on every id route for another tenant’s ids', async () => {
  const doc = (await api.get('/api/v1/openapi.json')).body;
  const checked: string[] = [];
  for (const [path, methods] of Object.entries(doc.paths as Record<string, Record<string, unknown>>)) {
    const match = /^(.*)\/\{(\w+)\}$/.exec(path);
    if (!match || !(match[1] in theirIds)) continue;
    const id = theirIds[match[1]];
    for (const method of Object.keys(methods).map((m) => m.toUpperCase())) {
      const name = `${method} ${path}`;
      const body = VALID_BODIES[name];
      if (method === 'PATCH' || method === 'PUT') expect(body).toBeDefined();
      for (const credential of [{ token: mine.accessToken }, { token: (await createKey(api, mine.accessToken)).key }]) {
        if (path.startsWith('/api/v1/api-keys') && !credential.token.startsWith('ey')) continue; // keys: user sessions only
        const res = await api.request(method, path.replace(`{${match[2]}}`, id), { ...credential, body });
        const err = expectError(res, 404, 'RESOURCE_NOT_FOUND');
        expect(err.details).toEqual({ resource: expect.any(String), id });
        expect(res.text).not.toContain('theirs');
      }
      checked.push(name);
    }
  }
  // The id routes of the foundation: a new resource with id routes belongs in theirIds above.
  expect(checked.sort()).toEqual(
    expect.arrayContaining([
      'DELETE /api/v1/api-keys/{id}',
      'GET /api/v1/api-keys/{id}',
      'DELETE /api/v1/projects/{id}',
      'GET /api/v1/projects/{id}',
      'PATCH /api/v1/projects/{id}',
      'DELETE /api/v1/tenant/team/members/{userId}',
      'PATCH /api/v1/tenant/team/members/{userId}',
    ]),
  );
  // Nothing of theirs changed.
  expect((await api.get(`/api/v1/projects/${theirIds['/api/v1/projects']}`, { token: theirs.accessToken })).body.data.name).toBe('theirs');
  expect((await api.get(`/api/v1/api-keys/${theirIds['/api/v1/api-keys']}`, { token: theirs.accessToken })).status).toBe(200);
  const team = (await api.get('/api/v1/tenant/team/members', { token: theirs.accessToken })).body.data;
  expect(team.find((m: { userId: string }) => m.userId === theirIds['/api/v1/tenant/team/members']).role).toBe('member');
});

it('lists never show another tenant’s items', async () => {
  for (const path of ['/api/v1/projects', '/api/v1/api-keys', '/api/v1/tenant/team/members']) {
    const text = (await api.get(`${path}?limit=100`, { token: mine.accessToken })).text;
    for (const id of Object.values(theirIds)) expect(text).not.toContain(id);
    expect(text).not.toContain(theirs.userId);
  }
});
