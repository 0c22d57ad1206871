/**
 * The console's flows in Debian's chromium (issue 23): an agent created, run with an approval step and approved in
 * the page; a chat reply streamed into the playground and still there after a reload; a webhook endpoint created
 * and its delivery in its log. Issue 34: a new tenant signs up, adds a model on /models (by keyboard only) at the fake
 * provider, chats with it in the playground (by keyboard only) and sees the call with its credits on /requests; a key
 * with a budget created, then rotated with a grace period after which the old secret is refused; a run started
 * through the API appearing on an open /agents/:id; the management pages (secrets, webhooks, agents, keys, MCP
 * servers, audit log, events, billing alerts, regions) each driven once. Then axe-core on every console page: no serious or critical
 * violation. Screenshots on failure (step), and no CSP violation anywhere.
 */
import { readFileSync } from 'node:fs';
import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import type { Page } from 'playwright-core';
import { launchBrowser, signedInPage, step, trackRequests, type Browser } from '../helpers/browser';
import { client, eventually, signUp, type Account, type Client } from '../helpers/http';
import { startTestMcpServer, type TestMcpServer } from '../helpers/mcp-server';
import { startReceiver, type Receiver } from '../helpers/receiver';
import { invitationByAnotherReplica } from '../helpers/invitations';
import { outboxToken } from '../helpers/smtp';
import { startStack, type Stack } from '../helpers/stack';

jest.setTimeout(120_000);

let stack: Stack;
let api: Client;
let browser: Browser;
let openai: FakeProviderServer;
let receiver: Receiver;
let mcp: TestMcpServer;
let owner: Account;
let projectId: string;
const OPENAI_KEY = 'sk-tenant-openai-' + 'f'.repeat(32);
const AXE = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

beforeAll(async () => {
  openai = await startFakeOpenAI({ apiKey: OPENAI_KEY });
  receiver = await startReceiver();
  mcp = await startTestMcpServer();
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
  await mcp?.close();
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

it('streams a chat reply into the playground, keeps the session in the address, shows it after a reload, lists and deletes it', async () => {
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
  const sessionId = new URL(page.url()).pathname.split('/')[2];
  await step(page, 'chat-sessions', async () => {
    // Listed under the form, marked as the one shown; deleted from there, the page starts afresh.
    const link = page.locator(`a[href="/chat/${sessionId}"]`);
    expect(await link.getAttribute('aria-current')).toBe('page');
    const name = (await link.textContent())!;
    await page.getByRole('button', { name: `Delete ${name}` }).click();
    await page.getByRole('button', { name: `Confirm delete of ${name}` }).click();
    await page.waitForURL(/\/chat$/);
  });
  expect((await api.get(`/api/v1/chat/sessions/${sessionId}`, { token: owner.accessToken })).status).toBe(404);
  expect(problems).toEqual([]);
});

it('creates a webhook endpoint and shows its delivery in the log; rotates its secret, disables and enables it, deletes another', async () => {
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
  const webhookId = new URL(page.url()).pathname.split('/')[2];
  const active = async () => (await api.get(`/api/v1/webhooks/${webhookId}`, { token: owner.accessToken })).body.data.active;
  await step(page, 'webhook-secret-and-state', async () => {
    await page.getByLabel('Hours the old secret keeps signing').fill('0');
    await page.getByRole('button', { name: 'Rotate secret' }).click();
    await page.getByText('Secret rotated.', { exact: true }).waitFor();
    expect(await page.getByLabel('New signing secret (shown once)').inputValue()).toMatch(/^whsec_[A-Za-z0-9+/=]{40,}$/);
    await page.getByRole('button', { name: 'Disable', exact: true }).click();
    await page.getByText('Disabled: no deliveries until it is enabled.').waitFor();
    await page.getByRole('button', { name: 'Enable', exact: true }).waitFor();
  });
  expect(await active()).toBe(false);
  await step(page, 'webhook-enable', async () => {
    await page.getByRole('button', { name: 'Enable', exact: true }).click();
    await page.getByText('Enabled.', { exact: true }).waitFor();
  });
  expect(await active()).toBe(true);
  // Another endpoint, deleted from its page (this one stays for the pages after).
  const doomed = (
    await api.post('/api/v1/webhooks', { url: `${receiver.url}/doomed`, events: ['project.created'] }, { token: owner.accessToken })
  ).body.data;
  await step(page, 'webhook-delete', async () => {
    await page.goto(`${stack.url}/webhooks/${doomed.id}`);
    await page.getByRole('button', { name: `Delete ${receiver.url}/doomed` }).click();
    await page.getByRole('button', { name: `Confirm delete of ${receiver.url}/doomed` }).click();
    await page.waitForURL('**/webhooks');
  });
  expect((await api.get(`/api/v1/webhooks/${doomed.id}`, { token: owner.accessToken })).status).toBe(404);
  expect(problems).toEqual([]);
});

it('adds a secret, sets its next version in its row, finds it by name and deletes it', async () => {
  const token = owner.accessToken;
  const { page, problems } = await signedInPage(browser, stack.url, owner.cookie);
  await step(page, 'secret-versions', async () => {
    await page.goto(`${stack.url}/settings/secrets`);
    await page.getByLabel('Name').fill('CONSOLE_TOKEN');
    await page.getByLabel('Value', { exact: true }).fill('the first value');
    await page.getByRole('button', { name: 'Add secret' }).click();
    await page.getByText('Added CONSOLE_TOKEN.').waitFor();
    await page.getByRole('button', { name: 'New value of CONSOLE_TOKEN' }).click();
    await page.getByLabel('Next value of CONSOLE_TOKEN').fill('the second value');
    await page.getByRole('button', { name: 'Save value' }).click();
    await page.getByText('Saved version 2 of CONSOLE_TOKEN.').waitFor();
  });
  expect((await api.get('/api/v1/secrets/CONSOLE_TOKEN', { token })).body.data.version).toBe(2);
  await step(page, 'secret-search-delete', async () => {
    await api.post('/api/v1/secrets', { name: 'OTHER_SECRET', value: 'x' }, { token });
    await page.reload();
    await page.getByRole('rowheader', { name: 'OTHER_SECRET' }).waitFor();
    await page.getByLabel('Search').fill('console_tok');
    await page.getByRole('rowheader', { name: 'OTHER_SECRET' }).waitFor({ state: 'detached' });
    expect(await page.getByRole('table').getByRole('rowheader').allTextContents()).toEqual([expect.stringMatching(/^CONSOLE_TOKEN/)]);
    await page.getByRole('button', { name: 'Delete CONSOLE_TOKEN' }).click();
    await page.getByText('Deleted CONSOLE_TOKEN.').waitFor();
  });
  expect((await api.get('/api/v1/secrets/CONSOLE_TOKEN', { token })).status).toBe(404);
  expect(problems).toEqual([]);
});

/** Presses Tab until the focused element is the one labelled `label` (at most 40 presses): reachable by keyboard. */
async function tabTo(page: Page, label: string): Promise<void> {
  const target = page.getByLabel(label, { exact: true });
  for (let i = 0; i < 40; i++) {
    if (await target.evaluate((el) => el === (globalThis as any).document.activeElement)) return;
    await page.keyboard.press('Tab');
  }
  throw new Error(`${label} is not reachable with Tab`);
}

it('as a new tenant: adds a model on /models and chats with it in the playground, by keyboard only; the call is on /requests with its credits', async () => {
  const { page, problems } = await browser.newPage();
  const email = `models${Date.now()}@example.com`;
  await step(page, 'models-signup', async () => {
    await page.goto(`${stack.url}/login?signup=1&next=%2Fmodels`);
    await page.getByLabel('Name').fill('Model Owner');
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill('correct horse battery staple');
    await page.getByLabel('Organization').fill('Models Inc');
    await page.getByRole('button', { name: 'Create account' }).click();
    await page.waitForURL('**/models');
    await page.getByText('No models yet.').waitFor();
  });
  await step(page, 'models-keyboard', async () => {
    // Every field in order by Tab, typed by keys, submitted with Enter.
    await tabTo(page, 'Name');
    await page.keyboard.type('house-model');
    await page.keyboard.press('Tab');
    expect(await page.getByLabel('Provider', { exact: true }).evaluate((el) => el === (globalThis as any).document.activeElement)).toBe(
      true,
    );
    await page.keyboard.press('Tab');
    await page.keyboard.type('gpt-fake-house');
    // The address and the key pasted, as a user does (one input event each; a key typed is 49 round trips to the page).
    await tabTo(page, 'Base URL');
    await page.keyboard.insertText(openai.url);
    await tabTo(page, 'API key');
    await page.keyboard.insertText(OPENAI_KEY);
    await tabTo(page, 'Input price');
    await page.keyboard.type('100000');
    await tabTo(page, 'Output price');
    await page.keyboard.type('200000');
    await page.keyboard.press('Enter');
    const row = page.getByRole('row').filter({ has: page.getByRole('rowheader', { name: 'house-model' }) });
    await row.waitFor();
    expect(await row.getByRole('cell').allTextContents()).toEqual([
      'openai',
      'gpt-fake-house',
      '100000 in / 200000 out',
      'its own price',
      'enabled',
      expect.any(String),
    ]);
  });
  await step(page, 'playground-keyboard', async () => {
    await page.goto(`${stack.url}/chat`);
    await page.getByRole('option', { name: 'house-model' }).waitFor({ state: 'attached' });
    await tabTo(page, 'Model');
    await page.keyboard.press('ArrowDown'); // from "Default model" to the catalogue's first name
    expect(await page.getByLabel('Model', { exact: true }).inputValue()).toBe('house-model');
    await tabTo(page, 'System prompt');
    await page.keyboard.type('Answer briefly.');
    await tabTo(page, 'Temperature');
    await page.keyboard.type('0.3');
    await tabTo(page, 'Message');
    await page.keyboard.type('hello from the keyboard');
    await page.keyboard.press('Tab');
    expect(await page.getByRole('button', { name: 'Send' }).evaluate((el) => el === (globalThis as any).document.activeElement)).toBe(true);
    await page.keyboard.press('Enter');
    await page.getByRole('list', { name: 'Conversation' }).getByText('Echo: hello from the keyboard').waitFor();
    await page.waitForURL(/\/chat\/[^/]+$/);
  });
  // The provider got the playground's system prompt, temperature and the catalogue entry's upstream model.
  const sent = openai.requests.filter((r) => (r.body as any)?.model === 'gpt-fake-house').at(-1)!.body as any;
  expect(sent.messages[0]).toEqual({ role: 'system', content: 'Answer briefly.' });
  expect(sent.temperature).toBe(0.3);

  const login = await api.post('/api/v1/auth/login', { email, password: 'correct horse battery staple' });
  const token = login.body.data.accessToken;
  let entry: any;
  await eventually(async () => {
    entry = (await api.get('/api/v1/requests?model=house-model', { token })).body.data[0];
    return entry?.credits > 0;
  }, 10_000);
  await step(page, 'playground-cost', async () => {
    await page.locator('#session-tokens', { hasText: String(entry.inputTokens + entry.outputTokens) }).waitFor();
    expect(await page.locator('#session-credits').textContent()).toBe(String(entry.credits));
  });
  await step(page, 'requests', async () => {
    await page.getByRole('navigation').getByRole('link', { name: 'Requests' }).click();
    await page.waitForURL('**/requests');
    const row = page.getByRole('row').filter({ has: page.getByRole('cell', { name: 'house-model', exact: true }) });
    await row.waitFor();
    const cells = await row.getByRole('cell').allTextContents();
    expect(cells).toEqual(['house-model', 'session', 'ok', String(entry.inputTokens + entry.outputTokens), String(entry.credits)]);
    await page.getByLabel('Source').selectOption('v1');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.getByText('No requests match.').waitFor();
    await page.getByLabel('Source').selectOption('chat');
    await page.getByRole('button', { name: 'Filter' }).click();
    await row.getByRole('button').click();
    await page.getByRole('heading', { name: `Request ${entry.id}` }).waitFor();
  });
  // An agent on a catalogue model, allowed an MCP server's tools: chosen in the agent form, shown on /mcp-servers.
  const server = (await api.post('/api/v1/mcp-servers', { name: 'test-tools', url: mcp.url }, { token })).body.data;
  expect(server.status).toBe('ready');
  await step(page, 'agent-model-and-tools', async () => {
    await page.goto(`${stack.url}/agents`);
    await page.getByRole('option', { name: 'house-model' }).waitFor({ state: 'attached' });
    await page.getByLabel('Name').fill('Catalogue agent');
    await page.getByLabel('Model', { exact: true }).selectOption('house-model');
    await page.getByLabel('Autonomy').selectOption('autonomous');
    await page.getByRole('group', { name: 'Tools of test-tools' }).getByLabel('lookup (read-only)').check();
    await page.getByRole('button', { name: 'Create agent' }).click();
    await page.waitForURL(/\/agents\/[^/]+$/);
    await page.getByRole('heading', { name: 'Catalogue agent', level: 1 }).waitFor();
  });
  const agentId = new URL(page.url()).pathname.split('/')[2];
  const made = (await api.get(`/api/v1/agents/${agentId}`, { token })).body.data.config;
  expect([made.model, made.autonomyLevel, made.tools]).toEqual(['house-model', 'autonomous', [{ serverId: server.id, allow: ['lookup'] }]]);
  await step(page, 'agent-edit-model-and-tools', async () => {
    // The settings form shows what is set; back to the default model, one more tool.
    const tools = page.getByRole('group', { name: 'Tools of test-tools' });
    expect(await tools.getByLabel('lookup (read-only)').isChecked()).toBe(true);
    expect(await page.getByLabel('Model', { exact: true }).inputValue()).toBe('house-model');
    expect(await page.getByLabel('Autonomy').inputValue()).toBe('autonomous');
    await page.getByLabel('Model', { exact: true }).selectOption('');
    await tools.getByLabel('write_note').check();
    await page.getByRole('button', { name: 'Save agent' }).click();
    await eventually(async () => (await api.get(`/api/v1/agents/${agentId}`, { token })).body.data.config.model === null, 5000);
  });
  const saved = (await api.get(`/api/v1/agents/${agentId}`, { token })).body.data.config;
  expect([saved.autonomyLevel, saved.tools]).toEqual(['autonomous', [{ serverId: server.id, allow: ['lookup', 'write_note'] }]]);
  await step(page, 'mcp-allowed-tools', async () => {
    await page.goto(`${stack.url}/mcp-servers`);
    const row = page.getByRole('row').filter({ has: page.getByRole('rowheader', { name: 'test-tools' }) });
    await row.getByRole('cell').filter({ hasText: 'Catalogue agent: lookup, write_note' }).waitFor();
    await row.getByRole('link', { name: 'Catalogue agent' }).click();
    await page.waitForURL(`**/agents/${agentId}#edit-title`);
  });
  await step(page, 'default-model', async () => {
    await page.goto(`${stack.url}/models`);
    await page.getByRole('link', { name: 'Change the default model' }).click();
    await page.getByLabel('Provider').selectOption('openai-compatible');
    await page.getByLabel('Model', { exact: true }).fill('gpt-fake-default');
    await page.getByLabel('Base URL').fill(openai.url);
    await page.getByLabel('API key').fill(OPENAI_KEY);
    await page.getByRole('button', { name: 'Save default model' }).click();
    await page.getByText('Saved: calls that name no model use gpt-fake-default.').waitFor();
    // Drawn again, the form shows the saved provider (not the list's first), so saving again keeps it.
    await page.reload();
    await page.getByLabel('Model', { exact: true }).waitFor();
    expect(await page.getByLabel('Provider').inputValue()).toBe('openai-compatible');
  });
  const llm = (await api.get('/api/v1/tenant/settings/llm', { token })).body.data;
  expect(llm).toMatchObject({ provider: 'openai-compatible', model: 'gpt-fake-default', baseUrl: openai.url, apiKeySet: true });
  await step(page, 'mcp-edit', async () => {
    await page.goto(`${stack.url}/mcp-servers`);
    await page.getByRole('button', { name: 'Edit test-tools' }).click();
    expect(await page.getByLabel('Server URL of test-tools').inputValue()).toBe(mcp.url);
    await page.getByLabel('Name of test-tools').fill('renamed-tools');
    await page.getByRole('button', { name: 'Save test-tools' }).click();
    await page.getByText(/^Saved renamed-tools: \d+ tools\.$/).waitFor();
    await page.getByRole('rowheader', { name: 'renamed-tools' }).waitFor();
  });
  expect((await api.get(`/api/v1/mcp-servers/${server.id}`, { token })).body.data).toMatchObject({ name: 'renamed-tools', url: mcp.url });
  expect(problems).toEqual([]);
});

it('creates a key with a budget, shows its usage against it, and rotates it: the old secret is refused after the grace period; changes its limits', async () => {
  const { page, problems } = await signedInPage(browser, stack.url, owner.cookie);
  let first = '';
  await step(page, 'key-budget', async () => {
    await page.goto(`${stack.url}/settings/security/api-keys`);
    await page.getByLabel('Name').fill('budgeted');
    await page.getByLabel('Credit budget').fill('500');
    await page.getByLabel('Budget period').selectOption('total');
    await page.getByRole('button', { name: 'Create key' }).click();
    const shown = page.getByLabel('Key', { exact: true });
    await eventually(async () => /^svc_/.test(await shown.inputValue().catch(() => '')), 5000);
    first = await shown.inputValue();
    const row = page.getByRole('row').filter({ has: page.getByRole('cell', { name: 'budgeted', exact: true }) });
    await row.getByText('0 of 500 (total) credits').waitFor();
  });
  expect((await api.get('/api/v1/projects', { token: first })).status).toBe(200);
  let second = '';
  await step(page, 'key-rotate', async () => {
    await page.getByRole('button', { name: 'Rotate budgeted' }).click();
    await page.getByLabel('Grace period for the old budgeted key (seconds)').fill('1');
    await page.getByRole('button', { name: 'Confirm rotate of budgeted' }).click();
    await page.getByText('Key budgeted rotated').waitFor();
    const shown = page.getByLabel('Key', { exact: true });
    await eventually(async () => (await shown.inputValue()) !== first, 5000);
    second = await shown.inputValue();
  });
  expect(second).toMatch(/^svc_/);
  // Refused within a second of the grace period's end (1 s), the new secret working throughout.
  await eventually(async () => (await api.get('/api/v1/projects', { token: first })).status === 401, 5000);
  expect((await api.get('/api/v1/projects', { token: second })).status).toBe(200);
  await step(page, 'key-limits', async () => {
    await page.reload();
    await page.getByRole('button', { name: 'Change limits of budgeted' }).click();
    // The form shows the key's limits: changed, added, and an empty field removes one.
    expect(await page.getByLabel('Credit budget of budgeted').inputValue()).toBe('500');
    expect(await page.getByLabel('Budget period of budgeted').inputValue()).toBe('total');
    await page.getByLabel('Credit budget of budgeted').fill('800');
    await page.getByLabel('Requests per minute of budgeted').fill('30');
    await page.getByRole('button', { name: 'Save limits of budgeted' }).click();
    await page.getByText('Limits of budgeted saved').waitFor();
    const row = page.getByRole('row').filter({ has: page.getByRole('cell', { name: 'budgeted', exact: true }) });
    await row.getByText(/of 30 requests\/min.* of 800 \(total\) credits/).waitFor();
  });
  const keys = (await api.get('/api/v1/api-keys', { token: owner.accessToken })).body.data;
  expect(keys.find((k: { name: string }) => k.name === 'budgeted').limits).toEqual({
    requestsPerMinute: 30,
    creditBudget: { credits: 800, period: 'total' },
  });
  expect(problems).toEqual([]);
});

it('shows a run started through the API on an open /agents/:id, without a reload; deletes the agent from there', async () => {
  const agent = (
    await api.post(
      '/api/v1/agents',
      { name: 'Watched agent', systemPrompt: '', config: { autonomyLevel: 'manual' } },
      { token: owner.accessToken },
    )
  ).body.data;
  const { page, problems } = await signedInPage(browser, stack.url, owner.cookie);
  await step(page, 'agent-live', async () => {
    await page.goto(`${stack.url}/agents/${agent.id}`);
    await page.getByText('No runs yet.').waitFor();
    openai.script({ type: 'text', text: 'Started elsewhere, shown here.' });
    const run = await api.post(`/api/v1/agents/${agent.id}/execute`, { goal: 'Run from the API', projectId }, { token: owner.accessToken });
    expect(run.status).toBe(202);
    const item = page.getByRole('listitem', { name: 'Run: Run from the API' });
    await item.getByLabel('Output').filter({ hasText: 'Started elsewhere, shown here.' }).waitFor();
  });
  await step(page, 'agent-delete', async () => {
    await page.getByRole('button', { name: 'Delete Watched agent' }).click();
    await page.getByRole('button', { name: 'Confirm delete of Watched agent' }).click();
    await page.waitForURL('**/agents');
  });
  expect((await api.get(`/api/v1/agents/${agent.id}`, { token: owner.accessToken })).status).toBe(404);
  expect(problems).toEqual([]);
});

it('invites by email from the team page; the invitee opens the emailed link, sets a password and lands in the tenant; a reused, revoked or expired link is refused', async () => {
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
  // Refused in the page: the same link again (reused), a revoked invitation's link, an expired invitation's link.
  const revokedEmail = `revoked-${Date.now()}@example.com`;
  await step(page, 'revoke-invitation', async () => {
    await page.getByLabel('Email').fill(revokedEmail);
    await page.getByRole('button', { name: 'Invite', exact: true }).click();
    await page.getByRole('button', { name: `Revoke the invitation of ${revokedEmail}` }).click();
    await page.getByText(`Revoked the invitation of ${revokedEmail}.`).waitFor();
    await page.getByRole('rowheader', { name: revokedEmail }).waitFor({ state: 'detached' });
  });
  const expiredEmail = `expired-${Date.now()}@example.com`;
  await invitationByAnotherReplica(stack.dataDir, owner, expiredEmail, '0.0000003', 'none');
  const refusedLinks = {
    reused: token,
    revoked: await outboxToken(stack.dataDir, revokedEmail, '/invitations'),
    expired: await outboxToken(stack.dataDir, expiredEmail, '/invitations'),
  };
  const stranger = await browser.newPage();
  for (const [why, link] of Object.entries(refusedLinks)) {
    await step(stranger.page, `invitation-${why}`, async () => {
      await stranger.page.goto(`${stack.url}/invitations/${link}`);
      await stranger.page.getByLabel('Name').fill(`Too late (${why})`);
      await stranger.page.getByLabel('Password').fill('a refused password');
      await stranger.page.getByRole('button', { name: 'Join' }).click();
      await stranger.page.getByRole('alert').filter({ hasText: 'This invitation was used, revoked or has expired' }).waitFor();
      expect(new URL(stranger.page.url()).pathname).toBe(`/invitations/${link}`);
    });
  }
  const members = (await api.get('/api/v1/tenant/team/members', { token: owner.accessToken })).body.data.map((m: any) => m.email);
  expect(members).toContain(email);
  expect(members).not.toContain(revokedEmail);
  expect(members).not.toContain(expiredEmail);
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
  expect([...problems, ...invitee.problems, ...visitor.problems, ...stranger.problems]).toEqual([]);
});

/** A datetime-local field's value for `ms` (the browser's zone is this process's). */
const localInput = (ms: number) => new Date(ms - new Date(ms).getTimezoneOffset() * 60_000).toISOString().slice(0, 16);

it('shows the audit log verified with a secret by its name, the events with their bodies; saves billing alerts; recovers missed events', async () => {
  const token = owner.accessToken;
  await api.post('/api/v1/secrets', { name: 'AUDITED_SECRET', value: 'kept quiet' }, { token });
  const { page, problems } = await signedInPage(browser, stack.url, owner.cookie);
  await step(page, 'audit-log', async () => {
    await page.goto(`${stack.url}/audit-log`);
    await page.getByText(/^The chain is intact: [\d,]+ entries checked\.$/).waitFor();
    await page.getByLabel('Action').fill('secret.created');
    await page.getByRole('button', { name: 'Filter' }).click();
    // The target is the secret's name, as the API shows it: never an internal id.
    const row = page.getByRole('row').filter({ has: page.getByRole('rowheader', { name: 'secret.created' }) });
    await row.filter({ hasText: 'AUDITED_SECRET' }).waitFor();
    expect(await row.filter({ hasText: 'AUDITED_SECRET' }).getByRole('cell').nth(2).textContent()).toBe('secret AUDITED_SECRET');
  });
  await step(page, 'events', async () => {
    await page.goto(`${stack.url}/events`);
    await page.getByLabel('Type').selectOption('project.created');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.getByRole('rowheader', { name: 'project.created' }).first().waitFor();
    expect(new Set(await page.getByRole('rowheader').allTextContents())).toEqual(new Set(['project.created']));
    await page
      .getByRole('button', { name: /^Body of project\.created / })
      .first()
      .click();
    await page.locator('pre.output').filter({ hasText: '"type": "project.created"' }).waitFor();
  });
  await step(page, 'billing-alerts', async () => {
    await page.goto(`${stack.url}/settings/billing`);
    await page.getByLabel('Alert when the balance falls below').fill('100');
    await page.getByLabel('Alert when a key spends these percents of its budget (comma separated)').fill('50, 90');
    await page.getByRole('button', { name: 'Save alerts' }).click();
    await page.getByText('Billing alerts saved.').waitFor();
  });
  expect((await api.get('/api/v1/billing/alerts', { token })).body.data).toMatchObject({ balanceBelow: 100, keyBudgetPercents: [50, 90] });

  // An endpoint disabled while a project is created: that event is missed, shown on its page, and Recover sends it.
  const hook = (await api.post('/api/v1/webhooks', { url: `${receiver.url}/recover`, events: ['project.created'] }, { token })).body.data;
  await api.patch(`/api/v1/webhooks/${hook.id}`, { active: false }, { token });
  const missedProject = (await api.post('/api/v1/projects', { name: 'Made while disabled' }, { token })).body.data;
  await eventually(
    async () => (await api.get(`/api/v1/events?deliveryFailed=true&webhookId=${hook.id}`, { token })).body.data.length === 1,
    10_000,
  );
  await step(page, 'webhook-recover', async () => {
    await page.goto(`${stack.url}/webhooks/${hook.id}`);
    const missed = page.getByRole('table').filter({ has: page.getByRole('columnheader', { name: 'Event id' }) });
    await missed.getByRole('cell', { name: 'project.created' }).waitFor();
    await page.getByLabel('Deliver again events since').fill(localInput(Date.now() - 3_600_000));
    await page.getByRole('button', { name: 'Recover', exact: true }).click();
    await page.getByText('Recover queued 1 events for delivery.').waitFor();
  });
  await eventually(async () => receiver.at('/recover').some((r) => r.json.data?.id === missedProject.id), 10_000);
  expect((await api.get(`/api/v1/webhooks/${hook.id}`, { token })).body.data.active).toBe(true);
  expect(problems).toEqual([]);
});

it('sets the regional preferences and the file storage on /settings/regions, and tests a bucket connection', async () => {
  const token = owner.accessToken;
  const { page, problems } = await signedInPage(browser, stack.url, owner.cookie);
  await step(page, 'regions', async () => {
    await page.goto(`${stack.url}/settings/regions`);
    // The free plan has no failover region: the page says which plan does.
    await page.getByText('A failover region needs the growth plan (this tenant is on free).').waitFor();
    await page.getByLabel('Primary region').selectOption('eu-west');
    await page.getByLabel('Data must stay in one region').check();
    await page.getByLabel('Residency region').selectOption('eu-west');
    await page.getByLabel('Compliance level').selectOption('gdpr');
    await page.getByRole('button', { name: 'Save preferences' }).click();
    await page.getByText('Preferences saved.').waitFor();
    await page.getByLabel('Platform region').selectOption('eu-central');
    await page.getByRole('button', { name: 'Save storage' }).click();
    await page.getByText('Storage saved.').waitFor();
    await page.getByText('Served by').waitFor();
  });
  const prefs = (await api.get(`/api/v1/regions/preferences/${owner.tenantId}`, { token })).body.data;
  expect(prefs).toEqual({
    primaryRegion: 'eu-west',
    secondaryRegion: null,
    dataResidencyRequired: true,
    dataResidencyRegion: 'eu-west',
    complianceLevel: 'gdpr',
  });
  expect((await api.get(`/api/v1/regions/storage/${owner.tenantId}`, { token })).body.data).toMatchObject({
    storageMode: 'platform',
    platformRegion: 'eu-central',
  });
  await step(page, 'regions-test-bucket', async () => {
    // A bucket at an address where nothing answers: the test says which checks failed, and nothing is saved.
    await page.getByLabel('Storage', { exact: true }).selectOption('byos');
    await page.getByLabel('Bucket provider').selectOption('s3');
    await page.getByLabel('Endpoint').fill('http://127.0.0.1:9');
    await page.getByLabel('Bucket', { exact: true }).fill('console-bucket');
    await page.getByLabel('Bucket region').fill('us-east-1');
    await page.getByLabel('Access key').fill('AKIACONSOLETEST0');
    await page.getByLabel('Secret key').fill('not-a-real-secret');
    await page.getByRole('button', { name: 'Test connection' }).click();
    await page
      .getByRole('list', { name: 'Connection test' })
      .getByText(/^failed: /)
      .first()
      .waitFor();
  });
  expect((await api.get(`/api/v1/regions/storage/${owner.tenantId}`, { token })).body.data.storageMode).toBe('platform');
  expect(problems).toEqual([]);
});

it('passes axe-core on every console and settings page with no serious or critical violation', async () => {
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
    '/settings/regions',
    '/settings/billing',
    '/models',
    '/models/default',
    '/requests',
    '/mcp-servers',
    '/audit-log',
    '/events',
    '/login',
    // The account pages a one-time link opens (CONTRACT.md 13), with a token that is not valid.
    '/forgot-password',
    '/invitations/not-a-token',
    '/reset-password/not-a-token',
    '/verify-email/not-a-token',
    // The API reference (/docs) is checked by docs.test.ts, with an operation open and tried and the Authorize dialog
    // open: axe-core over its hundred operations is the costliest page here, and that state holds all of this one's.
  ];
  // An MCP server, so the agent form shows its tools; a CLI login waiting for approval, so /cli/login shows it.
  await api.post('/api/v1/mcp-servers', { name: 'axe-tools', url: mcp.url }, { token: owner.accessToken });
  const cli = (
    await api.post('/api/v1/cli/auth/start', {
      state: 'a'.repeat(64),
      codeChallenge: 'b'.repeat(43),
      codeChallengeMethod: 'S256',
      cliVersion: '1.0.0',
      platform: 'linux-x64',
    })
  ).body.data;
  pages.push('/login?signup=1', `/cli/login?loginId=${cli.loginId}&state=${'a'.repeat(64)}`, '/oauth/acme/callback?error=access_denied');
  const { page, problems } = await signedInPage(browser, stack.url, owner.cookie);
  const requests = trackRequests(page);
  const found: Record<string, string[]> = {};
  for (const path of pages) {
    await step(page, `axe-${path}`, async () => {
      await page.goto(`${stack.url}${path}`);
      await page.getByRole('heading', { level: 1 }).first().waitFor();
      // The page's data is in: no request in flight for 100 ms.
      await requests.quiet();
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
