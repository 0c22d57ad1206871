import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import { lookup } from 'node:dns/promises';
import { isGlobalUnicast } from '@svc/kit';
import { client, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// OWASP API7 (SSRF) on every URL a tenant can set, with the egress guard closed as in production: webhook URLs
// (create and update), LLM base URLs and storage endpoints. Every special range of the finding, the spellings a URL
// parser turns into loopback, and the IPv6 forms that carry an IPv4 address are refused when saved, naming the field.
// A host name is judged by what it resolves to when the call is made: a model call to a name of this machine never
// reaches the listener behind it.
let stack: Stack;
let api: Client;
let owner: Account;
let hookId: string;
let mcpId: string;
let listener: Server;
let hits = 0;
let port: number;

beforeAll(async () => {
  listener = createServer((req, res) => {
    hits++;
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"internal":"answer"}');
  });
  await new Promise<void>((resolve) => listener.listen(0, '0.0.0.0', resolve));
  port = (listener.address() as AddressInfo).port;
  // The platform default LLM (an operator's setting, not judged when saved) names this machine: what a tenant can no
  // longer save is still refused by the guard when a call connects.
  stack = await startStack({
    env: {
      EGRESS_ALLOW_PRIVATE: 'false',
      LLM_PROVIDER: 'openai-compatible',
      LLM_MODEL: 'm',
      LLM_BASE_URL: `http://${hostname()}:${port}/v1`,
      MCP_CALL_TIMEOUT_S: '1',
    },
  });
  api = client(stack.url);
  owner = await signUp(api, 'SSRF');
  // A public address literal: registration does not connect.
  hookId = (
    await api.post(
      '/api/v1/webhooks',
      { url: 'https://93.184.215.14/hook', events: ['project.created'], secret: 'a-long-secret' },
      { token: owner.accessToken },
    )
  ).body.data.id;
  // An MCP server at a public address literal: allowed (whether it answers or not, it is registered).
  const mcp = await api.post('/api/v1/mcp-servers', { name: 'public', url: 'https://93.184.215.14/mcp' }, { token: owner.accessToken });
  expect(mcp.status).toBe(201);
  mcpId = mcp.body.data.id;
});
afterAll(async () => {
  await stack.stop();
  await new Promise((resolve) => listener.close(resolve));
});

const REFUSED_HOSTS = [
  '127.0.0.1',
  '127.1', // parsed as 127.0.0.1
  '2130706433', // parsed as 127.0.0.1
  '0x7f.0.0.1', // parsed as 127.0.0.1
  '0.0.0.0',
  '10.1.2.3',
  '172.16.3.4',
  '192.168.1.10',
  '100.64.0.1', // shared address space (CGNAT)
  '169.254.169.254', // cloud metadata
  '192.0.2.10', // documentation (TEST-NET-1)
  '198.51.100.7', // TEST-NET-2
  '203.0.113.9', // TEST-NET-3
  '198.18.0.1', // benchmarking
  '240.0.0.1', // reserved
  '[::1]',
  '[::]',
  '[::ffff:127.0.0.1]', // IPv4-mapped
  '[::127.0.0.1]', // IPv4-compatible (deprecated)
  '[64:ff9b::7f00:1]', // NAT64 of 127.0.0.1
  '[64:ff9b:1::a00:1]', // local-use NAT64
  '[2002:7f00:1::]', // 6to4 of 127.0.0.1
  '[100::1]', // discard-only
  '[2001::1]', // Teredo
  '[2001:db8::1]', // documentation
  '[fc00::1]', // unique local
  '[fe80::1]', // link-local
  'localhost',
  'api.localhost',
];

describe.each(REFUSED_HOSTS)('http://%s', (host) => {
  const url = `http://${host}:8080/x`;
  const t = () => ({ token: owner.accessToken });

  it('is refused as a webhook URL, at creation and on update', async () => {
    for (const res of [
      await api.post('/api/v1/webhooks', { url, events: ['project.created'], secret: 'a-long-secret' }, t()),
      await api.patch(`/api/v1/webhooks/${hookId}`, { url }, t()),
    ])
      expect(expectError(res, 400, 'VALIDATION_ERROR').details.fields).toEqual([{ field: 'url', message: expect.any(String) }]);
    expect((await api.get(`/api/v1/webhooks/${hookId}`, t())).body.data.url).toBe('https://93.184.215.14/hook');
  });

  it('is refused as an MCP server URL, at registration and on update', async () => {
    for (const res of [
      await api.post('/api/v1/mcp-servers', { name: 'internal', url }, t()),
      await api.patch(`/api/v1/mcp-servers/${mcpId}`, { url }, t()),
    ])
      expect(expectError(res, 400, 'VALIDATION_ERROR').details.fields).toEqual([{ field: 'url', message: expect.any(String) }]);
    expect((await api.get(`/api/v1/mcp-servers/${mcpId}`, t())).body.data.url).toBe('https://93.184.215.14/mcp');
  });

  it('is refused as an LLM base URL', async () => {
    const res = await api.patch('/api/v1/tenant/settings/llm', { provider: 'openai-compatible', model: 'm', baseUrl: url }, t());
    expect(expectError(res, 400, 'VALIDATION_ERROR').details.fields).toEqual([{ field: 'baseUrl', message: expect.any(String) }]);
  });

  it('is refused as a storage endpoint, saved or only validated', async () => {
    const config = {
      storageMode: 'byos',
      byosProvider: 's3',
      byosEndpoint: url,
      byosBucket: 'bucket',
      byosRegion: 'us-east-1',
      byosAccessKey: 'AKIAEXAMPLE',
      byosSecretKey: 'secret-key-example',
    };
    const path = `/api/v1/regions/storage/${owner.tenantId}`;
    for (const res of [await api.put(path, config, t()), await api.post(`${path}/validate`, config, t())])
      expect(expectError(res, 400, 'VALIDATION_ERROR').details.fields).toEqual([{ field: 'byosEndpoint', message: expect.any(String) }]);
  });
});

describe('an LLM base URL is judged by the addresses its name resolves to when it is saved', () => {
  // `localhost.` (a trailing dot: not the name `localhost` to a string check, loopback to the resolver) and the
  // machine's own name (its loopback or private address) were accepted when saved, refused only at the first call.
  const names = () => [`http://localhost.:${port}/v1`, `http://${hostname()}:${port}/v1`];

  it('is refused in the settings and in every fallback entry, with the field named', async () => {
    const t = { token: owner.accessToken };
    for (const url of names()) {
      const main = await api.patch('/api/v1/tenant/settings/llm', { provider: 'openai-compatible', model: 'm', baseUrl: url }, t);
      expect(expectError(main, 400, 'VALIDATION_ERROR').details.fields).toEqual([
        { field: 'baseUrl', message: expect.stringMatching(/loopback name|resolves to .* not a global unicast/) },
      ]);
      const fallback = await api.patch(
        '/api/v1/tenant/settings/llm',
        {
          provider: 'openai',
          model: 'm',
          apiKey: 'sk-test-key-1234',
          fallbacks: [
            { provider: 'openai', model: 'public' },
            { provider: 'openai-compatible', model: 'm', baseUrl: url },
          ],
        },
        t,
      );
      expect(expectError(fallback, 400, 'VALIDATION_ERROR').details.fields).toEqual([
        { field: 'fallbacks[1].baseUrl', message: expect.stringMatching(/loopback name|resolves to .* not a global unicast/) },
      ]);
    }
    // Nothing was saved: the tenant still uses the platform default.
    expect((await api.get('/api/v1/tenant/settings/llm', t)).body.data).toMatchObject({ source: 'platform', fallbacks: [] });
  });
});

it('judges a host name by its address at call time: a model call to a name of this machine never leaves', async () => {
  // The machine's own name resolves to one of its addresses (loopback or the host's private one), which the guard
  // refuses; the listener answers on every interface, so a call that got through would be counted. A tenant cannot
  // save that name any more; the platform default (LLM_BASE_URL) names it here.
  const addresses = await lookup(hostname(), { all: true });
  expect(addresses.some((a) => !isGlobalUnicast(a.address))).toBe(true);
  const other = await signUp(api, 'SSRF default');
  const t = { token: other.accessToken };
  expect((await api.get('/api/v1/tenant/settings/llm', t)).body.data).toMatchObject({
    source: 'platform',
    baseUrl: `http://${hostname()}:${port}/v1`,
  });
  const session = (await api.post('/api/v1/chat/sessions', {}, t)).body.data.id;
  const posted = await api.post(`/api/v1/chat/sessions/${session}/messages`, { content: 'what is inside?' }, t);
  expect(posted.status).toBe(202);
  let reply: any;
  await eventually(async () => {
    const list = (await api.get(`/api/v1/chat/sessions/${session}/messages`, t)).body.data;
    reply = list.find((m: { id: string }) => m.id === posted.body.data.responseMessageId);
    return reply?.status === 'failed';
  });
  expect(reply.error).toEqual({
    code: 'LLM_BAD_REQUEST',
    message: expect.stringMatching(/base URL is not allowed: .* not a global unicast/),
  });
  expect(JSON.stringify(reply)).not.toContain('internal');
  expect(hits).toBe(0);
});
