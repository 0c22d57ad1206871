import { client, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// The egress guard closed, as in production: tenant-chosen URLs may not point inside the network.
let stack: Stack;
let api: Client;
let owner: Account;

beforeAll(async () => {
  stack = await startStack({ env: { EGRESS_ALLOW_PRIVATE: 'false' } });
  api = client(stack.url);
  owner = await signUp(api, 'Guarded');
});
afterAll(() => stack.stop());

it.each([
  'http://127.0.0.1:8080/hook',
  'http://localhost/hook',
  'http://[::1]/hook',
  'http://10.0.0.7/hook',
  'http://172.16.3.4/hook',
  'http://192.168.1.10/hook',
  'http://169.254.169.254/latest/meta-data',
  'http://[::ffff:127.0.0.1]/hook',
  'http://0.0.0.0/hook',
])('refuses %s at registration with a 400', async (url) => {
  const err = expectError(
    await api.post('/api/v1/webhooks', { url, events: ['project.created'], secret: 'a-long-secret' }, { token: owner.accessToken }),
    400,
    'VALIDATION_ERROR',
  );
  expect(err.details.fields).toEqual([{ field: 'url', message: expect.stringMatching(/loopback|private|metadata|reserved/) }]);
});

it('refuses moving an existing registration to a private address', async () => {
  // A public address literal: registration does not connect, so no network is needed.
  const created = await api.post(
    '/api/v1/webhooks',
    { url: 'https://93.184.215.14/hook', events: ['project.created'], secret: 'a-long-secret' },
    { token: owner.accessToken },
  );
  expect(created.status).toBe(201);
  const id = created.body.data.id;
  expectError(
    await api.patch(`/api/v1/webhooks/${id}`, { url: 'http://10.1.2.3/' }, { token: owner.accessToken }),
    400,
    'VALIDATION_ERROR',
  );
  expect((await api.get(`/api/v1/webhooks/${id}`, { token: owner.accessToken })).body.data.url).toBe('https://93.184.215.14/hook');
});
