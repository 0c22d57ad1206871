/**
 * The console's flows in Debian's chromium (issue 23): an agent created, run with an approval step and approved in
 * the page; a chat reply streamed into the playground and still there after a reload; a webhook endpoint created
 * and its delivery in its log. Then axe-core on every console page: no serious or critical violation. Screenshots
 * on failure (step), and no CSP violation anywhere.
 */
import { readFileSync } from 'node:fs';
import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { launchBrowser, signedInPage, step, type Browser } from '../helpers/browser';
import { client, signUp, type Account, type Client } from '../helpers/http';
import { startReceiver, type Receiver } from '../helpers/receiver';
import { outboxToken } from '../helpers/smtp';
import { startStack, type Stack } from '../helpers/stack';

jest.setTimeout(120_000);

let stack: Stack;
let api: Client;
let browser: Browser;
let openai: FakeProviderServer;
let receiver: Receiver;
let owner: Account;
let projectId: string;
const OPENAI_KEY = 'sk-tenant-openai-' + 'f'.repeat(32);
const AXE = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

beforeAll(async () => {
  openai = await startFakeOpenAI({ apiKey: OPENAI_KEY });
  receiver = await startReceiver();
  stack = await startStack({
    env: { EGRESS_ALLOW_PRIVATE: 'true', CHAT_DRAIN_MS: '0', AGENTS_POLL_MS: '50', WEBHOOK_RETRY_SCHEDULE: '1' },
  });
  api = client(stack.url);
  browser = await launchBrowser();
  owner = await signUp(api, 'Flows');
  const llm = { provider: 'openai', model: 'gpt-fake', baseUrl: openai.url, apiKey: OPENAI_KEY };
  expect((await api.patch('/api/v1/tenant/settings/llm', llm, { token: owner.accessToken })).status).toBe(200);
  projectId = (await api.post('/api/v1/projects', { name: 'Flows project', language: 'go' }, { token: owner.accessToken })).body.data.id;
});
afterAll(async () => {
  await browser?.close();
  await stack?.stop();
  await openai?.close();
  await receiver?.close();
});

it('creates an agent, runs it, approves its tool call in the page and shows the output', async () => {
  openai.script(
    { type: 'tool_calls', toolCalls: [{ name: 'update_project', arguments: { language: 'python' } }] },
    { type: 'text', text: 'Moved the project to Python.' },
  );
  const { page, problems } = await signedInPage(browser, stack.url, owner.cookie);
  await step(page, 'agent-approve', async () => {
    await page.goto(`${stack.url}/agents`);
    await page.getByLabel('Name').fill('Console agent');
    await page.getByLabel('Autonomy').selectOption('supervised');
    await page.getByRole('button', { name: 'Create agent' }).click();
    await page.waitForURL(/\/agents\/[^/]+$/);
    await page.getByRole('heading', { name: 'Console agent', level: 1 }).waitFor();

    await page.getByLabel('Project').selectOption({ label: 'Flows project' });
    await page.getByLabel('Goal').fill('Move the project to Python');
    await page.getByRole('button', { name: 'Run', exact: true }).click();
    const run = page.getByRole('listitem', { name: 'Run: Move the project to Python' });
    // The run reaches requires_approval without a reload.
    await run.getByText('requires_approval', { exact: true }).first().waitFor();
    await run.getByRole('button', { name: 'Reject' }).waitFor();
    await run.getByRole('button', { name: 'Approve' }).click();
    await run.getByLabel('Output').filter({ hasText: 'Moved the project to Python.' }).waitFor();
    await run.getByText('completed', { exact: true }).first().waitFor();
  });
  expect((await api.get(`/api/v1/projects/${projectId}`, { token: owner.accessToken })).body.data.language).toBe('python');
  expect(problems).toEqual([]);
});

it('streams a chat reply into the playground, keeps the session in the address, and shows it after a reload', async () => {
  const { page, problems } = await signedInPage(browser, stack.url, owner.cookie);
  await step(page, 'chat', async () => {
    await page.goto(`${stack.url}/chat`);
    await page.getByLabel('Project').selectOption({ label: 'Flows project' });
    await page.getByLabel('Message').fill('hello from the console');
    await page.getByRole('button', { name: 'Send' }).click();
    const conversation = page.getByRole('list', { name: 'Conversation' });
    await conversation.getByText('Echo: hello from the console').waitFor();
    await page.waitForURL(/\/chat\/[^/]+$/);
    const sessionId = new URL(page.url()).pathname.split('/')[2];
    const messages = (await api.get(`/api/v1/chat/sessions/${sessionId}/messages`, { token: owner.accessToken })).body.data;
    expect(messages.map((m: any) => m.role).sort()).toEqual(['assistant', 'user']);

    await page.reload();
    await conversation.getByText('hello from the console', { exact: true }).waitFor();
    await conversation.getByText('Echo: hello from the console').waitFor();
  });
  expect(problems).toEqual([]);
});

it('creates a webhook endpoint and shows its delivery in the log', async () => {
  const { page, problems } = await signedInPage(browser, stack.url, owner.cookie);
  await step(page, 'webhook', async () => {
    await page.goto(`${stack.url}/webhooks`);
    await page.getByLabel('Endpoint URL').fill(`${receiver.url}/console`);
    await page.getByLabel('Signing secret').fill('whsec_console_secret_123456');
    await page.getByLabel('project.created').check();
    await page.getByRole('button', { name: 'Add endpoint' }).click();
    await page.getByRole('link', { name: `${receiver.url}/console` }).click();
    await page.waitForURL(/\/webhooks\/[^/]+$/);
  });
  await api.post('/api/v1/projects', { name: 'Announced' }, { token: owner.accessToken });
  await step(page, 'webhook-log', async () => {
    const row = page.getByRole('row').filter({ has: page.getByRole('rowheader', { name: 'project.created' }) });
    for (
      let i = 0;
      i < 50 &&
      (await row
        .getByRole('cell')
        .first()
        .textContent()
        .catch(() => null)) !== 'succeeded';
      i++
    ) {
      await page.getByRole('button', { name: 'Refresh' }).click();
      await page.waitForTimeout(200);
    }
    expect(await row.getByRole('cell').allTextContents()).toEqual(['succeeded', '1', '200', expect.any(String), expect.any(String)]);
  });
  expect(receiver.at('/console').map((r) => r.json.type)).toContain('project.created');
  expect(problems).toEqual([]);
});

it('invites by email from the team page; the invitee opens the emailed link, sets a password and lands in the tenant', async () => {
  const email = `invited-${Date.now()}@example.com`;
  const { page, problems } = await signedInPage(browser, stack.url, owner.cookie);
  await step(page, 'invite', async () => {
    await page.goto(`${stack.url}/settings/team`);
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Role', { exact: true }).selectOption('admin');
    await page.getByRole('button', { name: 'Invite' }).click();
    await page.getByRole('rowheader', { name: email }).waitFor();
  });
  // No SMTP_URL here: the system writes the message to DATA_DIR/outbox, where its link is read.
  const token = await outboxToken(stack.dataDir, email, '/invitations');
  const invitee = await browser.newPage();
  await step(invitee.page, 'accept-invitation', async () => {
    await invitee.page.goto(`${stack.url}/invitations/${token}`);
    await invitee.page.getByLabel('Name').fill('Invited Admin');
    await invitee.page.getByLabel('Password').fill('an invited password');
    await invitee.page.getByRole('button', { name: 'Join' }).click();
    await invitee.page.waitForURL(/\/projects$/);
    await invitee.page.getByText(`${email} · Flows`).waitFor();
  });
  const login = await api.post('/api/v1/auth/login', { email, password: 'an invited password' });
  expect([login.body.data.user.role, login.body.data.tenant.id]).toEqual(['admin', owner.tenantId]);
  // Sign-in's way to a reset link.
  const visitor = await browser.newPage();
  await step(visitor.page, 'forgot-password', async () => {
    await visitor.page.goto(`${stack.url}/login`);
    await visitor.page.getByRole('link', { name: 'Forgot password?' }).click();
    await visitor.page.getByLabel('Email').fill(email);
    await visitor.page.getByRole('button', { name: 'Send reset link' }).click();
    await visitor.page.getByText('If an account has this address').waitFor();
  });
  expect(await outboxToken(stack.dataDir, email, '/reset-password')).toMatch(/^[0-9A-Za-z]{43}$/);
  expect([...problems, ...invitee.problems, ...visitor.problems]).toEqual([]);
});

it('passes axe-core on every console and settings page, and /docs, with no serious or critical violation', async () => {
  const agentId = (await api.get('/api/v1/agents', { token: owner.accessToken })).body.data[0].id;
  const webhookId = (await api.get('/api/v1/webhooks', { token: owner.accessToken })).body.data[0].id;
  const pages = [
    '/projects',
    '/agents',
    `/agents/${agentId}`,
    '/chat',
    '/webhooks',
    `/webhooks/${webhookId}`,
    '/usage',
    '/settings/team',
    '/settings/secrets',
    '/settings/security/api-keys',
    '/settings/security/network',
    '/settings/billing',
    '/login',
    // The API reference: Swagger UI with the page's mends (gateway/src/docs/assets, decision 81).
    '/docs',
  ];
  const { page, problems } = await signedInPage(browser, stack.url, owner.cookie);
  const found: Record<string, string[]> = {};
  for (const path of pages) {
    await step(page, `axe-${path}`, async () => {
      await page.goto(`${stack.url}${path}`);
      await page.getByRole('heading', { level: 1 }).first().waitFor();
      // /docs: every operation rendered (the viewer sets aria-busy when it is done).
      if (path === '/docs') await page.locator('#reference[aria-busy="false"]').waitFor({ timeout: 30_000 });
      await page.waitForLoadState('networkidle');
      // Evaluated through the DevTools protocol, so the page's CSP (no inline script) stays as it is.
      await page.evaluate(AXE);
      const violations: Array<{ id: string; impact: string; nodes: unknown[] }> = await page.evaluate(
        async () => ((await (globalThis as any).axe.run((globalThis as any).document, { resultTypes: ['violations'] })) as any).violations,
      );
      const bad = violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
      if (bad.length) found[path] = bad.map((v) => `${v.id} (${v.impact}, ${v.nodes.length} nodes)`);
    });
  }
  expect(found).toEqual({});
  expect(problems).toEqual([]);
});
