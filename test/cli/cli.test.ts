import { execFile } from 'node:child_process';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { buildProgram } from '@svc/cli';
import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { cliHome, leafCommands, SOURCE_BIN, startCli, svc } from '../helpers/cli';
import { client, createKey, eventually, signUp, type Account, type Client } from '../helpers/http';
import { startReceiver } from '../helpers/receiver';
import { startTcpProxy } from '../helpers/tcp-proxy';
import { startStack, type Stack } from '../helpers/stack';
import { Webhook } from 'standardwebhooks';

// The real `svc` as a process against the running system: API-key and browser-flow logins (approved and denied over
// HTTP here; in a browser in test/browser), whoami, projects, agents run --follow, a streamed chat reply, keys,
// --json, the credentials file's mode, and the exit codes of CONTRACT.md 7. Then every command's --json output
// (table-driven, checked against the command tree), --all past 100, svc api, completion in bash, delete's
// confirmation, profiles, and listen (forwarding, and its resume after a dropped connection through a local proxy).
jest.setTimeout(90_000);

type Command = ReturnType<typeof buildProgram>;

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
  expect((await svc(['projects', 'delete', project.id, '--yes'], envFor(home))).stdout).toContain(`Deleted project ${project.id}`);

  // SVC_API_KEY works without any saved login.
  const viaEnv = await svc(['whoami'], { ...envFor(cliHome()), SVC_API_KEY: key });
  expect(viaEnv.stdout).toContain(owner.email);
  // The suite runs the CLI bundled (helpers/cli.ts); a checkout's launcher runs the same source through tsx.
  const fromSource = await promisify(execFile)(process.execPath, [SOURCE_BIN, 'whoami'], {
    env: { PATH: process.env.PATH, HOME: cliHome(), SVC_BASE_URL: stack.url, SVC_API_KEY: key },
  });
  expect(fromSource.stdout).toMatch(new RegExp(`^${owner.email} \\(tenant .*, signed in with api_key\\)$`, 'm'));
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
  expect((await svc(['keys', 'revoke', created.id, '-y'], envFor(home))).stdout).toContain(`Revoked key ${created.id}`);
  const token = JSON.parse(readFileSync(join(home, 'svc', 'credentials.json'), 'utf8')).profiles.default.accessToken as string;
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

/** The leaf command that arguments run. */
function commandOf(program: Command, args: string[]): string {
  const path: string[] = [];
  let c = program;
  for (const a of args) {
    const sub = c.commands.find((s) => s.name() === a);
    if (!sub) break;
    path.push(a);
    c = sub;
  }
  return path.join(' ');
}
/** A command's --json output: one JSON document, or (streams) one JSON object per line. */
function parseJson(stdout: string): unknown {
  try {
    return JSON.parse(stdout);
  } catch {
    return stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as unknown);
  }
}

describe('every command', () => {
  let receiver: Server;
  let receiverUrl: string;
  beforeAll(async () => {
    receiver = createServer((_req, res) => res.writeHead(204).end());
    await new Promise<void>((ok) => receiver.listen(0, '127.0.0.1', ok));
    receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
  });
  afterAll(() => new Promise((ok) => receiver.close(ok)));

  it('prints JSON that parses with --json, for every command of the tree', async () => {
    // Signed in as a user (keys need one), in a named profile.
    const home = cliHome();
    const env = { ...envFor(home), SVC_PROFILE: 'user' };
    const login = startCli(['login', '--json'], env);
    const [, authUrl] = await login.waitFor(/"authUrl":"([^"]+)"/);
    const url = new URL(authUrl);
    await api.post(
      '/api/v1/cli/auth/complete',
      { loginId: url.searchParams.get('loginId'), state: url.searchParams.get('state') },
      {
        token: owner.accessToken,
      },
    );
    const loggedIn = await login.done;
    expect(loggedIn.code).toBe(0);
    // --json: one object per line, the address and code, then who signed in.
    expect(parseJson(loggedIn.stdout)).toEqual([
      { event: 'login_started', authUrl, verificationCode: expect.stringMatching(/^[A-Z]{4}-[A-Z]{4}$/) },
      expect.objectContaining({ event: 'signed_in', user: expect.objectContaining({ email: owner.email }) }),
    ]);
    // The model's answers, by the goal: a tool call to approve or reject, a call that never answers (to cancel).
    llm.setDefault((req) => {
      const said = JSON.stringify(req.conversation?.messages ?? []);
      if (said.includes('"role":"tool"')) return { type: 'text', text: 'done' };
      if (said.includes('ask first'))
        return { type: 'tool_calls', toolCalls: [{ name: 'update_project', arguments: { description: 'x' } }] };
      if (said.includes('hang here')) return { type: 'hang' };
      return { type: 'text', text: 'fine' };
    });
    const firstId = async (path: string) => {
      let id = '';
      await eventually(async () => Boolean((id = (await api.get(path, { token: owner.accessToken })).body.data[0]?.id ?? '')), 10_000);
      return id;
    };
    const settled = async (webhookId: string, deliveryId: string) => {
      const path = `/api/v1/webhooks/${webhookId}/deliveries`;
      const status = async () =>
        (await api.get(path, { token: owner.accessToken })).body.data.find((d: any) => d.id === deliveryId)?.status;
      await eventually(async () => !['pending', undefined].includes(await status()), 10_000);
      return deliveryId;
    };
    type Out = Record<string, any>;
    type Step = { as?: string; args: (o: Out) => string[] | Promise<string[]> };
    const step = (args: Step['args'], as?: string): Step => ({ args, as });
    const lastRun = (lines: any[]) => lines[lines.length - 1].run;
    // Each chain runs in order (a step may use what an earlier one printed, by its `as`); the chains run at once.
    const chains: Step[][] = [
      [
        step(() => ['projects', 'create', 'Json', '--description', 'made for --json'], 'project'),
        step(() => ['projects', 'list', '--limit', '5']),
        step((o) => ['projects', 'get', o.project.id]),
        step((o) => ['projects', 'update', o.project.id, '--language', 'go']),
        step((o) => ['projects', 'delete', o.project.id, '--yes']),
        step(() => ['whoami']),
        step(() => ['usage', '--group-by', 'model']),
      ],
      [
        step(() => ['projects', 'create', 'Worked on'], 'project'),
        step(() => ['agents', 'create', 'json agent', '--prompt', 'Be brief.'], 'agent'),
        step((o) => ['agents', 'run', o.agent.id, '--project', o.project.id, '--goal', 'ask first', '--follow'], 'run1'),
        step((o) => ['agents', 'approve', o.agent.id, lastRun(o.run1).id]),
        step((o) => ['agents', 'follow', o.agent.id, lastRun(o.run1).id]),
        step((o) => ['agents', 'run', o.agent.id, '--project', o.project.id, '--goal', 'ask first', '--follow'], 'run2'),
        step((o) => ['agents', 'reject', o.agent.id, lastRun(o.run2).id, '--reason', 'no']),
        step((o) => ['agents', 'run', o.agent.id, '--project', o.project.id, '--goal', 'hang here'], 'run3'),
        step((o) => ['agents', 'cancel', o.agent.id, o.run3.id]),
        step((o) => ['agents', 'runs', 'list', o.agent.id]),
        step((o) => ['agents', 'runs', 'get', o.agent.id, o.run3.id]),
      ],
      [
        step(() => ['agents', 'create', 'json agent 2'], 'agent'),
        step(() => ['agents', 'list']),
        step((o) => ['agents', 'get', o.agent.id]),
        step((o) => ['agents', 'update', o.agent.id, '--autonomy', 'supervised']),
        step((o) => ['agents', 'delete', o.agent.id, '--yes']),
        step(() => ['events', 'list', '--type', 'project.created', '--limit', '3']),
        step(async () => ['events', 'get', await firstId('/api/v1/events')]),
        step(() => ['events', 'types']),
        step(() => ['api', 'GET', '/projects?limit=2']),
      ],
      [
        step(() => ['chat', 'send', 'hello', 'json'], 'chat'),
        step(() => ['chat', 'sessions', 'list']),
        step((o) => ['chat', 'sessions', 'get', o.chat[o.chat.length - 1].sessionId]),
        step((o) => ['chat', 'messages', o.chat[o.chat.length - 1].sessionId]),
        step((o) => ['chat', 'sessions', 'delete', o.chat[o.chat.length - 1].sessionId, '--yes']),
        step(() => ['requests', 'list', '--source', 'chat']),
        step(async () => ['requests', 'get', await firstId('/api/v1/requests')]),
      ],
      [
        step(
          () => [
            'models',
            'create',
            'json-model',
            '--provider',
            'openai-compatible',
            '--upstream-model',
            'gpt-fake',
            '--provider-url',
            llm.url,
          ],
          'model',
        ),
        step(() => ['models', 'list']),
        step((o) => ['models', 'get', o.model.id]),
        step((o) => ['models', 'update', o.model.id, '--weight', '2']),
        step((o) => ['models', 'delete', o.model.id, '--yes']),
        step(() => ['secrets', 'create', 'JSON_SECRET', '--value', 'one', '--description', 'for --json']),
        step(() => ['secrets', 'list']),
        step(() => ['secrets', 'get', 'JSON_SECRET']),
        step(() => ['secrets', 'update', 'JSON_SECRET', '--value', 'two']),
        step(() => ['secrets', 'delete', 'JSON_SECRET', '--yes']),
      ],
      [
        step(() => ['keys', 'create', 'json key', '--scope', 'projects:read'], 'key'),
        step(() => ['keys', 'list']),
        step((o) => ['keys', 'get', o.key.id]),
        step((o) => ['keys', 'update', o.key.id, '--name', 'renamed']),
        step((o) => ['keys', 'rotate', o.key.id, '--grace-period', '0']),
        step((o) => ['keys', 'revoke', o.key.id, '--yes']),
      ],
      [
        step(() => ['webhooks', 'create', receiverUrl, '--events', 'project.created'], 'webhook'),
        step(() => ['webhooks', 'list']),
        step((o) => ['webhooks', 'get', o.webhook.id]),
        step((o) => ['webhooks', 'update', o.webhook.id, '--events', 'project.created,project.deleted']),
        step((o) => ['webhooks', 'test', o.webhook.id], 'test'),
        step((o) => ['webhooks', 'deliveries', o.webhook.id]),
        step(async (o) => ['webhooks', 'retry', o.webhook.id, await settled(o.webhook.id, o.test.id)]),
        step((o) => ['webhooks', 'rotate-secret', o.webhook.id, '--grace-hours', '0']),
        step((o) => ['webhooks', 'recover', o.webhook.id, '--since', new Date(Date.now() - 60_000).toISOString()]),
        step((o) => ['webhooks', 'delete', o.webhook.id, '--yes']),
      ],
    ];
    const program = buildProgram({});
    const ran = new Set<string>();
    await Promise.all(
      chains.map(async (chain) => {
        const out: Out = {};
        for (const { args, as } of chain) {
          const argv = await args(out);
          ran.add(commandOf(program, argv));
          const res = await svc([...argv, '--json'], env);
          expect({ argv, code: res.code, stderr: res.stderr }).toEqual({ argv, code: 0, stderr: '' });
          const parsed = parseJson(res.stdout);
          expect(parsed).not.toBeUndefined();
          if (as) out[as] = parsed;
        }
      }),
    );
    llm.setDefault(undefined as never);
    // Signed in with --json above; out with it here.
    ran.add('login').add('logout');
    expect(parseJson((await svc(['logout', '--json'], env)).stdout)).toEqual({ signedOut: true });
    expect(
      parseJson((await svc(['login', '--api-key', (await createKey(api, owner.accessToken)).key, '--json'], env)).stdout),
    ).toMatchObject({
      user: { email: owner.email },
    });
    // Not here: completion (prints a script), listen (streams until stopped: its own tests, --json in the packaging suite).
    const elsewhere = ['completion', 'listen'];
    expect(leafCommands(program).filter((c) => !ran.has(c) && !elsewhere.includes(c))).toEqual([]);
  }, 180_000);
});

it('pages through every project with --all, --limit past one page, and svc api for any call', async () => {
  const other = await signUp(api, 'Cli pages');
  const { key } = await createKey(api, other.accessToken);
  const env = { ...envFor(cliHome()), SVC_API_KEY: key };
  const made: string[] = [];
  for (let batch = 0; batch < 6; batch++)
    made.push(
      ...(await Promise.all(
        Array.from({ length: 20 }, async (_, i) => {
          const res = await api.post('/api/v1/projects', { name: `p${batch * 20 + i}` }, { token: key });
          expect(res.status).toBe(201);
          return res.body.data.id as string;
        }),
      )),
    );
  const [all, some, firstPage, raw] = await Promise.all([
    svc(['projects', 'list', '--all', '--json'], env),
    svc(['projects', 'list', '--limit', '105', '--json'], env),
    svc(['projects', 'list'], env),
    svc(['api', 'GET', '/projects'], env),
  ]);
  expect(new Set(JSON.parse(all.stdout).map((p: { id: string }) => p.id))).toEqual(new Set(made));
  expect(JSON.parse(all.stdout)).toHaveLength(120);
  expect(JSON.parse(some.stdout)).toHaveLength(105);
  expect(firstPage.stdout.trim().split('\n')).toHaveLength(101); // the header and the first 100
  expect(firstPage.stderr).toContain('(more: --limit N for more, --all for every one)');
  // svc api prints the whole answer: the envelope with its cursor.
  expect(JSON.parse(raw.stdout)).toMatchObject({ data: expect.any(Array), meta: { pagination: { has_more: true } } });

  const body = join(cliHome(), 'body.json');
  writeFileSync(body, JSON.stringify({ name: 'From a file' }));
  const posted = await svc(['api', 'post', '/projects', '--data', `@${body}`], env);
  expect(JSON.parse(posted.stdout)).toMatchObject({ data: { name: 'From a file' } });
  const missing = await svc(['api', 'GET', '/projects/prj_doesnotexist0000'], env);
  expect(missing).toMatchObject({ code: 1, stderr: expect.stringContaining('RESOURCE_NOT_FOUND') });
  expect((await svc(['api', 'FETCH', '/projects'], env)).code).toBe(2);
});

it('prints completion scripts; the bash one loads and completes commands and options', async () => {
  const script = join(cliHome(), 'svc.bash');
  writeFileSync(script, (await svc(['completion', 'bash'], {})).stdout);
  const complete = (words: string) =>
    promisify(execFile)('bash', [
      '-c',
      `source ${script} && complete -p svc && COMP_WORDS=(${words}) && COMP_CWORD=$((\${#COMP_WORDS[@]} - 1)) && _svc && echo "\${COMPREPLY[*]}"`,
    ]);
  expect((await complete('svc ""')).stdout).toMatch(/^complete -F _svc svc\n.*\bprojects\b.*\bwebhooks\b.*\bcompletion\b/);
  expect((await complete('svc --profile work agents runs ""')).stdout).toContain('\nlist get\n');
  expect((await complete('svc projects list --a')).stdout).toContain('\n--all\n');
  const [zsh, fish] = await Promise.all([svc(['completion', 'zsh'], {}), svc(['completion', 'fish'], {})]);
  expect(zsh.stdout).toContain('bashcompinit');
  expect(fish.stdout).toContain("complete -c svc -f -a '(__svc_complete)'");
  expect((await svc(['completion', 'tcsh'], {})).code).toBe(2);
});

it('asks before a delete: without --yes and without a terminal it refuses and deletes nothing', async () => {
  const { key } = await createKey(api, owner.accessToken);
  const env = { ...envFor(cliHome()), SVC_API_KEY: key };
  const project = JSON.parse((await svc(['projects', 'create', 'Kept', '--json'], env)).stdout);
  const refused = await svc(['projects', 'delete', project.id], env);
  expect(refused.code).toBe(1);
  expect(refused.stderr).toContain(`Delete project ${project.id}? Not confirmed: stdin is not a terminal. Pass --yes to delete it.`);
  const raw = await svc(['api', 'DELETE', `/projects/${project.id}`], env);
  expect(raw).toMatchObject({ code: 1, stderr: expect.stringContaining('Not confirmed: stdin is not a terminal. Pass --yes to send it.') });
  expect((await api.get(`/api/v1/projects/${project.id}`, { token: key })).status).toBe(200);
});

it('keeps two logins apart in profiles (--profile and SVC_PROFILE), in one credentials file', async () => {
  const home = cliHome();
  const other = await signUp(api, 'Cli profiles');
  const [work, play] = await Promise.all([createKey(api, owner.accessToken), createKey(api, other.accessToken)]);
  expect((await svc(['login', '--profile', 'work', '--api-key', work.key], envFor(home))).stdout).toContain('profile work');
  expect((await svc(['login', '--api-key', play.key], { ...envFor(home), SVC_PROFILE: 'play' })).code).toBe(0);
  const whoami = async (env: Record<string, string>, ...args: string[]) =>
    JSON.parse((await svc(['whoami', '--json', ...args], env)).stdout);
  expect((await whoami(envFor(home), '--profile', 'work')).user.email).toBe(owner.email);
  expect((await whoami({ ...envFor(home), SVC_PROFILE: 'play' })).user.email).toBe(other.email);
  // --profile wins over SVC_PROFILE.
  expect((await whoami({ ...envFor(home), SVC_PROFILE: 'play' }, '--profile', 'work')).user.email).toBe(owner.email);
  const file = JSON.parse(readFileSync(join(home, 'svc', 'credentials.json'), 'utf8'));
  expect(Object.keys(file.profiles).sort()).toEqual(['play', 'work']);
  expect((await svc(['logout', '--profile', 'work'], envFor(home))).stdout).toContain('Signed out.');
  const gone = await svc(['whoami', '--profile', 'work'], envFor(home));
  expect(gone).toMatchObject({ code: 1, stderr: expect.stringContaining('Not signed in: run svc login --profile work') });
  expect((await whoami({ ...envFor(home), SVC_PROFILE: 'play' })).user.email).toBe(other.email);
  expect((await svc(['whoami', '--profile', '../x'], envFor(home))).stderr).toContain('Bad profile name');
});

it('loses no profile when several svc processes change the credentials file at once', async () => {
  const home = cliHome();
  const credentials = join(__dirname, '../../packages/cli/src/credentials.ts');
  // Four processes, each saving 150 profiles of its own as fast as it can (a read, a change and a write each time).
  const writer = (n: number) =>
    promisify(execFile)(process.execPath, [
      '--require',
      'tsx/cjs',
      '-e',
      `const { writeCredentials } = require(${JSON.stringify(credentials)});
for (let i = 0; i < 150; i++) writeCredentials({ XDG_CONFIG_HOME: ${JSON.stringify(home)} }, 'w${n}-' + i, { baseUrl: 'http://x', email: 'e', tenant: 't' });`,
    ]);
  await Promise.all([0, 1, 2, 3].map(writer));
  const file = JSON.parse(readFileSync(join(home, 'svc', 'credentials.json'), 'utf8'));
  expect(Object.keys(file.profiles)).toHaveLength(600);
  expect(readdirSync(join(home, 'svc'))).toEqual(['credentials.json']); // the lock is gone, no temp file left
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

it('listen resumes after its connection drops, from the last event seen: no event lost, none twice', async () => {
  const receiver = await startReceiver();
  const proxy = await startTcpProxy(stack.url);
  const { key } = await createKey(api, owner.accessToken);
  const listen = startCli(['listen', '--forward-to', `${receiver.url}/hook`, '--events', 'project.created'], {
    ...envFor(cliHome()),
    SVC_BASE_URL: proxy.url,
    SVC_API_KEY: key,
  });
  const create = async (name: string) => (await api.post('/api/v1/projects', { name }, { token: owner.accessToken })).body.data.id;
  const delivered = () => receiver.at('/hook').map((r) => r.json.data.id as string);
  try {
    await listen.waitFor(/Webhook signing secret/);
    const before = await create('Before the drop');
    await eventually(async () => delivered().includes(before), 20_000);
    // The stream is cut; its resume is held until a project was created while it was away.
    proxy.cut();
    await eventually(async () => proxy.held() > 0, 20_000);
    const during = await create('During the drop');
    proxy.release();
    const after = await create('After the drop');
    await eventually(async () => delivered().includes(after), 20_000);
    expect(delivered()).toEqual([before, during, after]);
    expect(listen.stderr()).toContain('Connection to the event stream lost; resuming...');
  } finally {
    listen.proc.kill('SIGINT');
    await listen.done;
    await receiver.close();
    await proxy.close();
  }
});
