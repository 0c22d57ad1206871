import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { cliHome, startCli, svc } from '../helpers/cli';
import { client, createKey, eventually, signUp, type Account, type Client } from '../helpers/http';
import { startReceiver } from '../helpers/receiver';
import { startStack, type Stack } from '../helpers/stack';
import { Webhook } from 'standardwebhooks';

// The real `svc` as a process against the running system: API-key and browser-flow logins (approved and denied over
// HTTP here; in a browser in test/browser), whoami, projects, agents run --follow, a streamed chat reply, keys,
// --json, the credentials file's mode, and the exit codes of CONTRACT.md 7.
jest.setTimeout(90_000);

let stack: Stack;
let api: Client;
let owner: Account;
let llm: FakeProviderServer;

beforeAll(async () => {
  llm = await startFakeOpenAI({ apiKey: 'sk-cli' });
  stack = await startStack({ env: { EGRESS_ALLOW_PRIVATE: 'true' } });
  api = client(stack.url);
  owner = await signUp(api, 'Cli');
  await api.patch(
    '/api/v1/tenant/settings/llm',
    { provider: 'openai', model: 'gpt-fake', baseUrl: llm.url, apiKey: 'sk-cli' },
    { token: owner.accessToken },
  );
});
afterAll(async () => {
  await stack.stop();
  await llm.close();
});

const envFor = (home: string) => ({ XDG_CONFIG_HOME: home, SVC_BASE_URL: stack.url });

it('signs in with an API key, keeps it in a 0600 file, and works with --json', async () => {
  const home = cliHome();
  const { key } = await createKey(api, owner.accessToken);
  const login = await svc(['login', '--api-key', key], envFor(home));
  expect(login).toMatchObject({ code: 0 });
  expect(login.stdout).toContain(`Signed in with an API key as ${owner.email}`);
  const file = join(home, 'svc', 'credentials.json');
  expect(statSync(file).mode & 0o777).toBe(0o600);
  expect(statSync(join(home, 'svc')).mode & 0o777).toBe(0o700);

  const who = await svc(['whoami', '--json'], envFor(home));
  expect(who.code).toBe(0);
  expect(JSON.parse(who.stdout)).toMatchObject({ user: { email: owner.email }, credential: { type: 'api_key' } });

  const created = await svc(['projects', 'create', 'From the CLI', '--description', 'made by svc', '--json'], envFor(home));
  const project = JSON.parse(created.stdout);
  expect(project).toMatchObject({ name: 'From the CLI', description: 'made by svc' });
  const list = await svc(['projects'], envFor(home));
  expect(list.stdout).toMatch(new RegExp(`${project.id}\\s+From the CLI`));
  expect((await svc(['projects', 'delete', project.id], envFor(home))).stdout).toContain(`Deleted project ${project.id}`);

  // SVC_API_KEY works without any saved login.
  const viaEnv = await svc(['whoami'], { ...envFor(cliHome()), SVC_API_KEY: key });
  expect(viaEnv.stdout).toContain(owner.email);
});

it('answers exit code 2 for bad arguments and 1 for API errors, with the request id', async () => {
  const home = cliHome();
  expect((await svc(['projects', 'create'], envFor(home))).code).toBe(2);
  expect((await svc(['--no-such-flag'], envFor(home))).code).toBe(2);
  const notSignedIn = await svc(['whoami'], envFor(home));
  expect(notSignedIn.code).toBe(1);
  expect(notSignedIn.stderr).toContain('Not signed in: run svc login');
  const badKey = await svc(['whoami'], { ...envFor(home), SVC_API_KEY: 'svc_sdk_' + 'x'.repeat(43) });
  expect(badKey.code).toBe(1);
  expect(badKey.stderr).toMatch(/Error: .*\[UNAUTHORIZED, request id [\w-]+\]/);
  const { key } = await createKey(api, owner.accessToken);
  const missing = await svc(['projects', 'get', 'prj_doesnotexist0000'], { ...envFor(home), SVC_API_KEY: key });
  expect(missing.code).toBe(1);
  expect(missing.stderr).toContain('RESOURCE_NOT_FOUND');
  const down = await svc(['whoami', '--base-url', 'http://127.0.0.1:9'], { XDG_CONFIG_HOME: home, SVC_API_KEY: key });
  expect(down.code).toBe(1);
  expect(down.stderr).toContain('Is the service running?');
});

it('logs in through the browser flow: prints the address and code, polls, prints who; logout ends the token', async () => {
  const home = cliHome();
  const cli = startCli(['login'], envFor(home));
  const [, authUrl] = await cli.waitFor(/^\s+(http\S+\/cli\/login\?\S+)$/m);
  const [, code] = await cli.waitFor(/Verification code: ([A-Z]{4}-[A-Z]{4})/);
  const loginId = new URL(authUrl).searchParams.get('loginId')!;
  const state = new URL(authUrl).searchParams.get('state')!;
  // What the browser shows is the same code; the signed-in user approves.
  expect((await api.get(`/api/v1/cli/auth/info?loginId=${loginId}`)).body.data.verificationCode).toBe(code);
  expect((await api.post('/api/v1/cli/auth/complete', { loginId, state }, { token: owner.accessToken })).status).toBe(200);
  const done = await cli.done;
  expect(done.code).toBe(0);
  expect(done.stdout).toContain(`Signed in as ${owner.email} (tenant `);
  expect(done.stdout).not.toMatch(/\u001b\[/); // not a terminal: no spinner

  const who = JSON.parse((await svc(['whoami', '--json'], envFor(home))).stdout);
  expect(who.credential.type).toBe('cli');
  // Signed in as a user, the CLI manages API keys: created (shown once), listed, revoked.
  const created = JSON.parse(
    (await svc(['keys', 'create', 'from svc', '--type', 'ci', '--scope', 'projects:read', '--json'], envFor(home))).stdout,
  );
  expect(created).toMatchObject({ name: 'from svc', type: 'ci', scopes: ['projects:read'], key: expect.stringMatching(/^svc_ci_/) });
  expect((await svc(['keys'], envFor(home))).stdout).toMatch(new RegExp(`${created.id}\\s+from svc\\s+svc_ci_`));
  expect((await svc(['keys', 'revoke', created.id], envFor(home))).stdout).toContain(`Revoked key ${created.id}`);
  const token = JSON.parse(readFileSync(join(home, 'svc', 'credentials.json'), 'utf8')).accessToken as string;
  expect((await svc(['logout'], envFor(home))).stdout).toContain('Signed out.');
  const after = await svc(['whoami'], envFor(home));
  expect(after.code).toBe(1);
  // The token itself was revoked, not just forgotten.
  let status = 200;
  for (let i = 0; i < 30 && status === 200; i++) {
    status = (await api.get('/api/v1/auth/me', { token })).status;
    if (status === 200) await new Promise((r) => setTimeout(r, 100));
  }
  expect(status).toBe(401);
});

it('stops with a clear message and exit code 1 when the login is denied', async () => {
  const home = cliHome();
  const cli = startCli(['login'], envFor(home));
  const [, authUrl] = await cli.waitFor(/^\s+(http\S+\/cli\/login\?\S+)$/m);
  const url = new URL(authUrl);
  await api.post(
    '/api/v1/cli/auth/deny',
    { loginId: url.searchParams.get('loginId'), state: url.searchParams.get('state') },
    { token: owner.accessToken },
  );
  const done = await cli.done;
  expect(done.code).toBe(1);
  expect(done.stderr).toContain('The login was denied in the browser or expired');
});

it('runs an agent with --follow, showing the tool step, approving it, and the output', async () => {
  const { key } = await createKey(api, owner.accessToken);
  const env = { ...envFor(cliHome()), SVC_API_KEY: key };
  const project = JSON.parse((await svc(['projects', 'create', 'Followed', '--json'], env)).stdout);
  const agent = JSON.parse(
    (await svc(['agents', 'create', 'follower', '--prompt', 'Be brief.', '--autonomy', 'supervised', '--json'], env)).stdout,
  );
  llm.script(
    { type: 'tool_calls', toolCalls: [{ name: 'update_project', arguments: { description: 'set by the agent' } }] },
    { type: 'text', text: 'Done: the description is set.' },
  );
  const run = await svc(
    ['agents', 'run', agent.id, '--project', project.id, '--goal', 'describe the project', '--follow', '--approve'],
    env,
  );
  expect(run.code).toBe(0);
  expect(run.stdout).toContain('• tool update_project {"description":"set by the agent"}: requires_approval');
  expect(run.stdout).toMatch(/• tool update_project .*: completed/);
  expect(run.stdout).toContain('Completed.\nDone: the description is set.');
  expect((await api.get(`/api/v1/projects/${project.id}`, { token: key })).body.data.description).toBe('set by the agent');
});

it('streams a chat reply as it comes, and manages keys', async () => {
  const home = cliHome();
  await svc(['login', '--api-key', (await createKey(api, owner.accessToken)).key], envFor(home));
  llm.script({ type: 'text', text: 'streamed word by word', delayMs: 20 });
  const chat = await svc(['chat', 'hello', 'there'], envFor(home));
  expect(chat.code).toBe(0);
  expect(chat.stdout).toBe('streamed word by word\n');
  expect(chat.stderr).toMatch(/session chs_\w+/);
  const json = await svc(['chat', 'again', '--json'], envFor(home));
  const lines = json.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  expect(lines[lines.length - 1]).toMatchObject({ event: 'completed', message: { status: 'completed' } });

  // Keys need a user session: with an API key the CLI shows the API's refusal.
  const refused = await svc(['keys'], envFor(home));
  expect(refused.code).toBe(1);
  expect(refused.stderr).toContain('FORBIDDEN');
});

it('listen --forward-to delivers each project.created as a signed delivery that standardwebhooks verifies', async () => {
  const receiver = await startReceiver();
  receiver.answer = (r) => (r.json?.data?.name === 'Second' ? { status: 500, body: 'no' } : { status: 200, body: 'ok' });
  const { key } = await createKey(api, owner.accessToken);
  const env = { ...envFor(cliHome()), SVC_API_KEY: key };
  expect((await svc(['listen', '--forward-to', `${receiver.url}/hook`, '--events', 'project.exploded'], env)).code).toBe(1);
  const listen = startCli(['listen', '--forward-to', `${receiver.url}/hook`, '--events', 'project.created'], env);
  try {
    const [, secret] = await listen.waitFor(/Webhook signing secret: (whsec_[A-Za-z0-9+/=]+)/);
    const first = (await api.post('/api/v1/projects', { name: 'First' }, { token: owner.accessToken })).body.data;
    await api.del(`/api/v1/projects/${first.id}`, { token: owner.accessToken }); // project.deleted: not asked for
    const second = (await api.post('/api/v1/projects', { name: 'Second' }, { token: owner.accessToken })).body.data;
    await eventually(async () => receiver.at('/hook').length >= 2, 20_000).catch((err) => {
      throw new Error(`${err}\n${listen.stdout()}\n${listen.stderr()}\n${JSON.stringify(receiver.requests.map((r) => r.path))}`);
    });
    const [a, b] = receiver.at('/hook');
    // Verified by the Standard Webhooks library with the printed secret and no options; another secret fails.
    const wh = new Webhook(secret);
    const headers = (r: typeof a) => ({
      'webhook-id': String(r.headers['webhook-id']),
      'webhook-timestamp': String(r.headers['webhook-timestamp']),
      'webhook-signature': String(r.headers['webhook-signature']),
    });
    expect(wh.verify(a.body, headers(a))).toMatchObject({ type: 'project.created', data: { id: first.id } });
    expect(wh.verify(b.body, headers(b))).toMatchObject({ type: 'project.created', data: { id: second.id } });
    expect(() => new Webhook(`whsec_${Buffer.alloc(32, 1).toString('base64')}`).verify(a.body, headers(a))).toThrow();
    // The delivery is the event as GET /events shows it, its id the webhook-id.
    expect(a.headers['webhook-id']).toBe(a.json.id);
    expect(a.json).toEqual((await api.get(`/api/v1/events/${a.json.id}`, { token: owner.accessToken })).body.data);
    // Each delivery's status is printed.
    await listen.waitFor(new RegExp(`project\\.created\\s+${a.json.id}\\s+-> 200`));
    await listen.waitFor(new RegExp(`project\\.created\\s+${b.json.id}\\s+-> 500`));
    expect(listen.stdout()).not.toContain('project.deleted');
  } finally {
    listen.proc.kill('SIGINT');
    await listen.done;
    await receiver.close();
  }
  expect((await listen.done).code).toBe(0);
});
