import { client, createKey, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

let stack: Stack;
let api: Client;
let owner: Account;

beforeAll(async () => {
  stack = await startStack();
  api = client(stack.url);
  owner = await signUp(api, 'Projects');
});
afterAll(() => stack.stop());

const P = '/api/v1/projects';

describe('projects CRUD', () => {
  it('creates, reads, updates and deletes a project', async () => {
    const created = await api.post(
      P,
      { name: ' Site ', description: 'The web site', language: 'typescript' },
      { token: owner.accessToken },
    );
    expect(created.status).toBe(201);
    const p = created.body.data;
    expect(p).toEqual({
      id: expect.stringMatching(/^prj_/),
      name: 'Site',
      description: 'The web site',
      language: 'typescript',
      created_at: expect.stringMatching(/Z$/),
      updated_at: p.created_at,
    });
    expect((await api.get(`${P}/${p.id}`, { token: owner.accessToken })).body.data).toEqual(p);

    const patched = await api.patch(`${P}/${p.id}`, { language: 'go' }, { token: owner.accessToken });
    expect(patched.status).toBe(200);
    expect(patched.body.data).toMatchObject({ id: p.id, name: 'Site', description: 'The web site', language: 'go' });
    expect(patched.body.data.updated_at >= p.updated_at).toBe(true);

    const del = await api.del(`${P}/${p.id}`, { token: owner.accessToken });
    expect(del.status).toBe(200);
    expect(del.body.data).toEqual({ id: p.id, deleted: true });
    expectError(await api.get(`${P}/${p.id}`, { token: owner.accessToken }), 404, 'RESOURCE_NOT_FOUND');
    const again = expectError(await api.del(`${P}/${p.id}`, { token: owner.accessToken }), 404, 'RESOURCE_NOT_FOUND');
    expect(again.details).toEqual({ resource: 'project', id: p.id });
  });

  it('lists newest first with cursor pagination and no item lost or repeated', async () => {
    const t = await signUp(api, 'Lister');
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) ids.push((await api.post(P, { name: `p${i}` }, { token: t.accessToken })).body.data.id);
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res: { status: number; body: any } = await api.get(`${P}?limit=3${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, {
        token: t.accessToken,
      });
      expect(res.status).toBe(200);
      expect(res.body.meta.pagination.limit).toBe(3);
      seen.push(...res.body.data.map((x: { id: string }) => x.id));
      cursor = res.body.meta.pagination.next_cursor;
      expect(res.body.meta.pagination.has_more).toBe(cursor !== null);
      pages++;
    } while (cursor);
    expect(pages).toBe(3);
    expect(seen).toEqual([...ids].reverse());
  });

  it('requires a name and refuses unknown fields and bad values', async () => {
    expectError(await api.post(P, { description: 'x' }, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
    const unknown = expectError(
      await api.post(P, { name: 'x', tenantId: 'ten_other' }, { token: owner.accessToken }),
      400,
      'VALIDATION_ERROR',
    );
    expect(unknown.details.fields).toEqual([{ field: 'tenantId', message: 'is not an allowed field' }]);
    expectError(await api.post(P, { name: '   ' }, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
    expectError(await api.post(P, { name: 'x'.repeat(201) }, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
    expectError(await api.patch(`${P}/prj_x`, { name: null }, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
    expectError(await api.get(`${P}?limit=0`, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
    expectError(await api.get(`${P}?cursor=not-a-cursor`, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
  });
});

describe('projects access', () => {
  it('another tenant sees 404 for every route, never the project', async () => {
    const mine = (await api.post(P, { name: 'secret' }, { token: owner.accessToken })).body.data;
    const other = await signUp(api, 'Other');
    for (const res of [
      await api.get(`${P}/${mine.id}`, { token: other.accessToken }),
      await api.patch(`${P}/${mine.id}`, { name: 'hijack' }, { token: other.accessToken }),
      await api.del(`${P}/${mine.id}`, { token: other.accessToken }),
    ]) {
      expectError(res, 404, 'RESOURCE_NOT_FOUND');
    }
    const list = await api.get(P, { token: other.accessToken, headers: { 'x-tenant-id': owner.tenantId } });
    expect(list.body.data).toEqual([]);
    expect((await api.get(`${P}/${mine.id}`, { token: owner.accessToken })).body.data.name).toBe('secret');
  });

  it('enforces projects:read and projects:write scopes', async () => {
    const reader = await createKey(api, owner.accessToken, { scopes: ['projects:read'] });
    const writer = await createKey(api, owner.accessToken, { scopes: ['projects:write'] });
    const agentsOnly = await createKey(api, owner.accessToken, { scopes: ['agents:read'] });
    expect((await api.get(P, { token: reader.key })).status).toBe(200);
    expect(expectError(await api.post(P, { name: 'x' }, { token: reader.key }), 403, 'FORBIDDEN').details.requiredScope).toBe(
      'projects:write',
    );
    expect((await api.post(P, { name: 'by writer' }, { token: writer.key })).status).toBe(201);
    expectError(await api.get(P, { token: writer.key }), 403, 'FORBIDDEN');
    expectError(await api.get(P, { token: agentsOnly.key }), 403, 'FORBIDDEN');
    const unscoped = await createKey(api, owner.accessToken);
    expect((await api.get(P, { token: unscoped.key })).status).toBe(200);
    expectError(await api.get(P), 401, 'UNAUTHORIZED');
  });
});
