import { createHash, randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import {
  APIConnectionError,
  APIError,
  APITimeoutError,
  ApiError,
  AuthenticationError,
  BadRequestError,
  ConflictError,
  InternalServerError,
  NotFoundError,
  OPERATIONS,
  PermissionDeniedError,
  RateLimitError,
  RESOURCE_METHODS,
  SvcClient,
  SvcError,
  UnprocessableEntityError,
  type CallOptions,
  type Input,
  type OperationId,
  type Output,
  type Project,
} from '@svc/sdk';
import { idempotencyErrors } from '@svc/kit';
import { eventually } from '../helpers/http';
import { startReceiver, type Receiver } from '../helpers/receiver';
import { startTestMcpServer } from '../helpers/mcp-server';
import { outboxToken } from '../helpers/smtp';
import { startStack, type Stack } from '../helpers/stack';

// The SDK against the running system: every operation of the OpenAPI document is a method, and the walk below
// calls every one of them (those driven by a third party, Stripe and the OpenID providers, have their own suites).
jest.setTimeout(90_000);

const ADMIN = 'operator-token-for-sdk-tests-0123456789';
let stack: Stack;
let llm: FakeProviderServer;
let receiver: Receiver;

/** Remembers which operations were called. */
const called = new Set<string>();
class TrackedClient extends SvcClient {
  protected override call<K extends OperationId>(id: K, input: Input<K>, options?: CallOptions): Promise<Output<K>> {
    called.add(id);
    return super.call(id, input, options);
  }
}

beforeAll(async () => {
  llm = await startFakeOpenAI({ apiKey: 'sk-sdk' });
  receiver = await startReceiver();
  stack = await startStack({ env: { SVC_ADMIN_TOKEN: ADMIN, EGRESS_ALLOW_PRIVATE: 'true' } });
});
afterAll(async () => {
  await stack.stop();
  await llm.close();
  await receiver.close();
});

it('has a method for every operation of the live OpenAPI document (a new route without one fails here)', async () => {
  const doc = (await (await fetch(`${stack.url}/api/v1/openapi.json`)).json()) as {
    paths: Record<string, Record<string, { operationId: string }>>;
  };
  // The OpenAI-compatible API (/v1) is for OpenAI clients (test/http/openai-compat.test.ts), not this SDK.
  const live = Object.entries(doc.paths)
    .filter(([path]) => !path.startsWith('/v1/'))
    .flatMap(([, m]) => Object.values(m).map((o) => o.operationId));
  const client = new SvcClient({ baseUrl: stack.url }) as unknown as Record<string, unknown>;
  const missing = live.filter((id) => typeof client[id] !== 'function' && !(id === 'streamChatReply' && client.streamChatReply));
  expect(missing).toEqual([]);
  expect(Object.keys(OPERATIONS).sort()).toEqual([...live].sort());
  // And a resource method for each (svc.projects.create, svc.agents.runs.list, ...), every one mounted.
  expect(Object.values(RESOURCE_METHODS).sort()).toEqual([...live].sort());
  for (const dotted of Object.keys(RESOURCE_METHODS))
    expect([dotted, typeof dotted.split('.').reduce((node: any, name) => node?.[name], client)]).toEqual([dotted, 'function']);
});

it('drives every endpoint through the SDK', async () => {
  const email = `sdk-${Date.now()}@example.com`;
  const anon = new TrackedClient({ baseUrl: stack.url });
  const reg = await anon.register({ body: { email, password: 'correct horse battery', name: 'Sdk', tenantName: 'Sdk Co' } });
  expect(reg.user.email).toBe(email);
  const login = await anon.login({ body: { email, password: 'correct horse battery' } });
  const sdk = new TrackedClient({ baseUrl: `${stack.url}/api/v1`, token: { accessToken: login.accessToken, expiresIn: login.expiresIn } });
  const tenantId = reg.tenant.id;

  // Identity.
  expect((await sdk.me()).user.email).toBe(email);
  // No OAUTH_PROVIDERS here: no provider to offer (the configured ones: external-auth.test.ts).
  expect(await sdk.listOAuthProviders()).toEqual({ providers: [] });
  expect((await sdk.getTenant()).id).toBe(tenantId);
  const refreshed = await anon.refresh({ body: { refreshToken: login.refreshToken } });
  sdk.setToken({ accessToken: refreshed.accessToken, expiresIn: refreshed.expiresIn });
  const member = await sdk.addTeamMember({ body: { email: `m-${email}`, name: 'M', role: 'member', password: 'password123' } });
  expect((await sdk.listTeamMembers()).map((m) => m.email)).toContain(`m-${email}`);
  expect((await sdk.updateTeamMember({ params: { userId: member.userId }, body: { role: 'admin' } })).role).toBe('admin');
  await sdk.removeTeamMember({ params: { userId: member.userId } });
  // Accounts: no SMTP_URL here, so the emails are files under DATA_DIR/outbox, where their links are read.
  const invited = await sdk.createInvitation({ body: { email: `i-${email}`, role: 'member' } });
  expect((await sdk.listInvitations()).map((i) => i.id)).toContain(invited.id);
  const joined = await anon.acceptInvitation({
    body: { token: await outboxToken(stack.dataDir, `i-${email}`, '/invitations'), name: 'I', password: 'password123' },
  });
  expect(joined.user.role).toBe('member');
  const unwanted = await sdk.createInvitation({ body: { email: `r-${email}`, role: 'member' } });
  expect((await sdk.revokeInvitation({ params: { id: unwanted.id } })).status).toBe('revoked');
  await anon.verifyEmail({ body: { token: await outboxToken(stack.dataDir, email, '/verify-email') } });
  await anon.forgotPassword({ body: { email: `i-${email}` } });
  const resetToken = await outboxToken(stack.dataDir, `i-${email}`, '/reset-password');
  expect(await anon.resetPassword({ body: { token: resetToken, password: 'password456' } })).toEqual({ reset: true });
  await sdk.putNetworkSettings({ body: { ipAllowlist: [] } });
  expect((await sdk.getNetworkSettings()).ipAllowlist).toEqual([]);
  await sdk.updateLlmSettings({ body: { provider: 'openai', model: 'gpt-fake', baseUrl: llm.url, apiKey: 'sk-sdk' } });
  expect((await sdk.getLlmSettings()).provider).toBe('openai');

  // API keys: created, listed, read, used, revoked.
  const key = await sdk.createApiKey({ body: { name: 'sdk', type: 'sdk', environment: 'development' } });
  expect((await sdk.listApiKeys()).map((k) => k.id)).toContain(key.id);
  expect((await sdk.getApiKey({ params: { id: key.id } })).name).toBe('sdk');
  const limited = await sdk.updateApiKey({ params: { id: key.id }, body: { limits: { requestsPerMinute: 600 } } });
  expect(limited.limits).toEqual({ requestsPerMinute: 600 });
  const spare = await sdk.createApiKey({ body: { name: 'spare', type: 'ci', environment: 'staging' } });
  const rotated = await sdk.rotateApiKey({ params: { id: spare.id }, body: { gracePeriodSeconds: 0 } });
  expect(rotated).toMatchObject({ id: spare.id, key: expect.stringMatching(/^svc_ci_/) });
  expect(rotated.key).not.toBe(spare.key);
  const withKey = new TrackedClient({ baseUrl: stack.url, apiKey: key.key });
  expect((await withKey.me()).credential.type).toBe('api_key');

  // Projects, through the resources (the methods above are their lower layer).
  const viaResource: Project = await sdk.projects.create({ name: 'Via resource' });
  expect(await sdk.projects.retrieve(viaResource.id)).toEqual(viaResource);
  expect((await sdk.projects.update(viaResource.id, { description: 'changed' })).description).toBe('changed');
  const firstPage = await sdk.projects.list({ limit: 1 }).page();
  expect(firstPage).toMatchObject({ data: [{ id: viaResource.id }], hasMore: false, nextCursor: null });
  expect(await sdk.projects.del(viaResource.id)).toEqual({ id: viaResource.id, deleted: true });
  await expect(sdk.projects.retrieve(viaResource.id)).rejects.toBeInstanceOf(NotFoundError);
  const project = await sdk.createProject({ body: { name: 'Sdk project', description: 'd', language: 'ts' } });
  expect((await sdk.getProject({ params: { id: project.id } })).name).toBe('Sdk project');
  expect((await sdk.updateProject({ params: { id: project.id }, body: { name: 'Renamed' } })).name).toBe('Renamed');
  const all: string[] = [];
  for await (const p of sdk.paginate('listProjects', { query: { limit: 1 } })) all.push((p as { id: string }).id);
  expect(all).toContain(project.id);
  expect((await sdk.listProjects()).length).toBeGreaterThan(0);

  // Agents and runs.
  const agent = await sdk.createAgent({ body: { name: 'helper', systemPrompt: 'Be brief.', config: { autonomyLevel: 'supervised' } } });
  expect((await sdk.getAgent({ params: { id: agent.id } })).name).toBe('helper');
  expect((await sdk.updateAgent({ params: { id: agent.id }, body: { name: 'helper 2' } })).name).toBe('helper 2');
  expect((await sdk.listAgents()).map((a) => a.id)).toContain(agent.id);
  llm.script({
    type: 'tool_calls',
    toolCalls: [{ name: 'update_project', arguments: { description: 'by the agent' } }],
    usage: { inputTokens: 10, outputTokens: 5 },
  });
  const run = await sdk.executeAgent({ params: { id: agent.id }, body: { goal: 'describe it', projectId: project.id } });
  const seen: string[] = [];
  for await (const r of sdk.followRun(agent.id, run.id, { intervalMs: 100, untilApproval: true })) seen.push(r.status);
  expect(seen[seen.length - 1]).toBe('requires_approval');
  await sdk.rejectAgentRun({ params: { id: agent.id, run_id: run.id }, body: { reason: 'not now' } });
  for await (const r of sdk.followRun(agent.id, run.id, { intervalMs: 100, untilApproval: true })) seen.push(r.status);
  if (seen[seen.length - 1] === 'requires_approval') await sdk.approveAgentRun({ params: { id: agent.id, run_id: run.id } });
  else await expect(sdk.approveAgentRun({ params: { id: agent.id, run_id: run.id } })).rejects.toMatchObject({ status: 409 });
  const second = await sdk.agents.runs.create(agent.id, { goal: 'again', projectId: project.id });
  await sdk.cancelAgentRun({ params: { id: agent.id, run_id: second.id } }).catch((e: ApiError) => expect(e.status).toBe(409));
  expect((await sdk.getAgentRun({ params: { id: agent.id, run_id: run.id } })).id).toBe(run.id);
  expect((await sdk.listAgentRuns({ params: { id: agent.id } })).length).toBe(2);
  const runIds: string[] = [];
  for await (const r of sdk.agents.runs.list(agent.id, { limit: 1 })) runIds.push(r.id);
  expect(runIds.sort()).toEqual([run.id, second.id].sort());
  expect((await sdk.agents.runs.retrieve(agent.id, run.id)).agentId).toBe(agent.id);

  // Chat: a reply streamed as an async iterator.
  const session = await sdk.createChatSession({ body: { title: 'sdk chat' } });
  expect((await sdk.getChatSession({ params: { id: session.id } })).title).toBe('sdk chat');
  expect((await sdk.listChatSessions()).map((s) => s.id)).toContain(session.id);
  llm.script({ type: 'text', text: 'hello from the model', usage: { inputTokens: 3, outputTokens: 4 } });
  await sdk.chat.sessions.messages.create(session.id, { content: 'hi' });
  let text = '';
  for await (const e of sdk.chat.sessions.stream(session.id)) {
    if (e.type === 'delta') text += e.delta;
    if (e.type === 'completed') expect(e.message).toMatchObject({ status: 'completed' });
  }
  called.add('streamChatReply');
  expect(text).toBe('hello from the model');
  expect((await sdk.listChatMessages({ params: { id: session.id } })).length).toBe(2);
  expect(await sdk.deleteChatSession({ params: { id: session.id } })).toEqual({ id: session.id, deleted: true });
  await expect(sdk.getChatSession({ params: { id: session.id } })).rejects.toMatchObject({ status: 404 });

  // Webhooks.
  const hook = await sdk.createWebhook({ body: { url: receiver.url, events: ['project.deleted'], secret: 'whsec-sdk-secret-0123' } });
  expect((await sdk.getWebhook({ params: { id: hook.id } })).url).toBe(receiver.url);
  expect(
    (await sdk.updateWebhook({ params: { id: hook.id }, body: { events: ['project.deleted', 'project.created'] } })).events,
  ).toHaveLength(2);
  expect((await sdk.listWebhooks()).map((w) => w.id)).toContain(hook.id);
  await sdk.testWebhook({ params: { id: hook.id } });
  let deliveries: Output<'listWebhookDeliveries'> = [];
  await eventually(async () =>
    (deliveries = await sdk.listWebhookDeliveries({ params: { id: hook.id } })).some((d) => d.status === 'succeeded'),
  );
  await sdk.retryWebhookDelivery({ params: { id: hook.id, deliveryId: deliveries[0].id } });
  const newSecret = await sdk.rotateWebhookSecret({ params: { id: hook.id }, body: { graceHours: 1 } });
  expect(newSecret.secret).toMatch(/^whsec_/);
  expect(Date.parse(newSecret.graceEndsAt!)).toBeGreaterThan(Date.now());

  // Events: the catalogue, the log, one event, what the webhook missed, and a recovery.
  expect((await sdk.listEventTypes()).map((t) => t.type)).toContain('project.deleted');
  let events: Output<'listEvents'> = [];
  await eventually(async () => (events = await sdk.listEvents({ query: { type: 'tenant.created' } })).length === 1);
  expect((await sdk.getEvent({ params: { id: events[0].id } })).data).toMatchObject({ id: tenantId });
  expect(await sdk.listEvents({ query: { deliveryFailed: true, webhookId: hook.id } })).toEqual([]);
  // The live stream, resumed after the tenant.created event: the events after it, then one made now.
  const stop = new AbortController();
  const live: string[] = [];
  const made = sdk.createProject({ body: { name: 'sdk-live' } });
  for await (const e of sdk.streamEvents({ lastEventId: events[0].id, signal: stop.signal })) {
    live.push(e.type);
    if (e.type === 'project.created' && (e.data as { name?: string }).name === 'sdk-live') stop.abort();
  }
  called.add('streamEvents');
  expect(live[live.length - 1]).toBe('project.created');
  expect(live).not.toContain('tenant.created');
  await made;
  const since = new Date(Date.now() - 60_000).toISOString();
  expect(await sdk.recoverWebhook({ params: { id: hook.id }, body: { since } })).toEqual({ queued: 0 });
  // The audit log: the key created above is in it, and the chain verifies.
  let audit: Output<'listAuditLog'> = [];
  await eventually(async () => (audit = await sdk.listAuditLog({ query: { action: 'api_key.created' } })).length >= 1);
  expect(audit[0]).toMatchObject({ action: 'api_key.created', target: { type: 'api_key' } });
  expect(await sdk.verifyAuditLog()).toMatchObject({ valid: true, firstBrokenId: null });
  // MCP servers: one built with the MCP SDK on loopback, registered, listed, renamed, refreshed and deleted.
  const tools = await startTestMcpServer();
  try {
    const server = await sdk.createMcpServer({ body: { name: 'notes', url: tools.url } });
    expect(server).toMatchObject({ status: 'ready', error: null, auth: null });
    expect(server.tools.map((t) => t.name)).toContain('lookup');
    expect((await sdk.getMcpServer({ params: { id: server.id } })).url).toBe(tools.url);
    expect((await sdk.listMcpServers()).map((x) => x.id)).toEqual([server.id]);
    expect((await sdk.updateMcpServer({ params: { id: server.id }, body: { name: 'notes 2' } })).name).toBe('notes 2');
    expect((await sdk.refreshMcpServer({ params: { id: server.id } })).status).toBe('ready');
    expect(await sdk.deleteMcpServer({ params: { id: server.id } })).toEqual({ id: server.id, deleted: true });
  } finally {
    await tools.close();
  }
  await sdk.deleteProject({ params: { id: project.id } });
  await sdk.deleteWebhook({ params: { id: hook.id } });
  await sdk.deleteAgent({ params: { id: agent.id } });

  // Regions.
  expect((await sdk.listRegions()).length).toBeGreaterThan(0);
  expect((await sdk.getRegionalPreferences({ params: { tenantId } })).primaryRegion).toEqual(expect.any(String));
  expect((await sdk.updateRegionalPreferences({ params: { tenantId }, body: { primaryRegion: 'eu-west' } })).primaryRegion).toBe('eu-west');
  await sdk.putStorageConfig({ params: { tenantId }, body: { storageMode: 'platform', platformRegion: 'eu-west' } });
  expect((await sdk.getStorageConfig({ params: { tenantId } })).storageMode).toBe('platform');
  const check = await sdk.validateStorageConfig({
    params: { tenantId },
    body: {
      storageMode: 'byos',
      byosProvider: 's3',
      byosBucket: 'bucket',
      byosEndpoint: 'http://127.0.0.1:9',
      byosAccessKey: 'k',
      byosSecretKey: 's',
    },
  });
  expect(check.valid).toBe(false);
  expect((await sdk.checkFeature({ params: { tenantId, featureKey: 'agents' } })).enabled).toBe(true);
  expect((await sdk.getRoutingInfo()).regions).toBeDefined();

  // Secrets.
  await sdk.createSecret({ body: { name: 'SDK_TOKEN', value: 'v1' } });
  expect((await sdk.updateSecret({ params: { name: 'SDK_TOKEN' }, body: { value: 'v2' } })).version).toBe(2);
  expect((await sdk.getSecret({ params: { name: 'SDK_TOKEN' } })).name).toBe('SDK_TOKEN');
  expect((await sdk.listSecrets()).map((s) => s.name)).toContain('SDK_TOKEN');
  await sdk.deleteSecret({ params: { name: 'SDK_TOKEN' } });

  // Billing, with the operator's calls.
  const operator = new TrackedClient({ baseUrl: stack.url, apiKey: ADMIN });
  const { codes } = await operator.adminMintGiftCards({ body: { credits: 50, count: 1 } });
  await operator.adminAdjustCredits({ params: { id: tenantId }, body: { delta: 5, reason: 'sdk test' } });
  await operator.adminSetTenantPlan({ params: { id: tenantId }, body: { plan: 'starter' } });
  expect((await sdk.redeemGiftCard({ body: { code: codes[0] } })).creditsAdded).toBe(50);
  const bought = await sdk.purchaseCredits({ body: { credits: 10 } });
  expect(bought).toMatchObject({ provider: 'sandbox', status: 'succeeded', creditsAdded: 10 });
  expect((await sdk.createSubscription({ body: { plan: 'growth' } })).subscription?.plan).toBe('growth');
  expect((await sdk.createBillingPortal()).url).toMatch(/\/settings\/billing$/);
  expect((await sdk.listInvoices()).length).toBe(2);
  expect((await sdk.getBillingSummary()).usage.calls).toBeGreaterThanOrEqual(1);
  const day = Date.now() - (Date.now() % 86_400_000);
  const usage = await sdk.getBillingUsage({
    query: { from: new Date(day).toISOString(), to: new Date(day + 86_400_000).toISOString(), groupBy: 'model' },
  });
  expect(usage.reduce((n, r) => n + r.calls, 0)).toBeGreaterThanOrEqual(1);
  const calls = await sdk.listRequests({ query: { limit: 100 } });
  expect(calls.reduce((n, c) => n + c.credits, 0)).toBe(usage.reduce((n, r) => n + r.credits, 0));
  expect((await sdk.getRequest({ params: { id: calls[0].id } })).id).toBe(calls[0].id);
  // The model catalogue.
  const model = await sdk.createModel({
    body: { name: 'sdk-model', provider: 'openai', upstreamModel: 'gpt-4o-mini', price: { input: 10, output: 20 } },
  });
  expect(model).toMatchObject({ name: 'sdk-model', upstreamModel: 'gpt-4o-mini', priceSource: 'entry', apiKeySet: false });
  expect((await sdk.getModel({ params: { id: model.id } })).id).toBe(model.id);
  expect((await sdk.updateModel({ params: { id: model.id }, body: { enabled: false } })).enabled).toBe(false);
  expect((await sdk.listModels()).map((m) => m.id)).toContain(model.id);
  await sdk.deleteModel({ params: { id: model.id } });
  const alerts = { balanceBelow: 100, keyBudgetPercents: [50, 80], dailyCreditsAbove: 5000 };
  expect(await sdk.putBillingAlerts({ body: alerts })).toEqual(alerts);
  expect(await sdk.getBillingAlerts()).toEqual(alerts);

  // CLI login, approved by this user, exchanged by the "terminal".
  const verifier = randomBytes(32).toString('base64url');
  const state = randomBytes(32).toString('hex');
  const started = await anon.startCliLogin({
    body: {
      state,
      codeChallenge: createHash('sha256').update(verifier).digest('base64url'),
      codeChallengeMethod: 'S256',
      cliVersion: '1',
      platform: 'sdk',
    },
  });
  expect((await anon.getCliLoginStatus({ query: { loginId: started.loginId } })).status).toBe('pending');
  expect((await anon.getCliLoginInfo({ query: { loginId: started.loginId } })).platform).toBe('sdk');
  await sdk.completeCliLogin({ body: { loginId: started.loginId, state } });
  const cli = await anon.exchangeCliLogin({ body: { loginId: started.loginId, codeVerifier: verifier } });
  expect(cli.user.email).toBe(email);
  const denied = await anon.startCliLogin({
    body: {
      state,
      codeChallenge: createHash('sha256').update(verifier).digest('base64url'),
      codeChallengeMethod: 'S256',
      cliVersion: '1',
      platform: 'sdk',
    },
  });
  await sdk.denyCliLogin({ body: { loginId: denied.loginId, state } });

  await sdk.revokeApiKey({ params: { id: key.id } });
  await sdk.logout();
  // Revoked on every gateway within a second (CONTRACT.md 3).
  await eventually(
    async () =>
      (await sdk.me().then(
        () => null,
        (e: unknown) => e,
      )) instanceof ApiError,
    3000,
  );

  // Every operation was called, except those a third party drives (their own suites: stripe, external-auth).
  const driven = ['receiveStripeWebhook', 'exchangeToken', 'startOAuth', 'authorizeOAuth'];
  expect(Object.keys(OPERATIONS).filter((id) => !called.has(id) && !driven.includes(id))).toEqual([]);
});

it("retries the gateway's 409 idempotency_key_in_progress until the first call with its key answers, then gets that answer", async () => {
  const email = `sdk-busy-${Date.now()}@example.com`;
  const anon = new SvcClient({ baseUrl: stack.url });
  await anon.auth.register({ email, password: 'correct horse battery', name: 'Busy', tenantName: 'Busy Co' });
  const { accessToken } = await anon.auth.login({ email, password: 'correct horse battery' });
  // An MCP server that holds every request until released: registering it waits on its probe, so the first call
  // holds its key; once released it drops every connection (the probe fails, the server is registered in error).
  const held: import('node:http').ServerResponse[] = [];
  let holding = true;
  const slow = createServer((_req, res) => (holding ? held.push(res) : res.socket?.destroy()));
  await new Promise<void>((r) => slow.listen(0, '127.0.0.1', r));
  const statuses: number[] = [];
  const watched: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    statuses.push(res.status);
    return res;
  };
  const svc = new SvcClient({ baseUrl: stack.url, token: { accessToken }, fetch: watched, maxRetries: 60, maxRetryDelayMs: 250 });
  try {
    const body = { name: 'held', url: `http://127.0.0.1:${(slow.address() as AddressInfo).port}/mcp` };
    const first = svc.mcpServers.create(body, { idempotencyKey: 'busy-1', maxRetries: 0 });
    await eventually(async () => held.length > 0, 10_000);
    const second = svc.mcpServers.create(body, { idempotencyKey: 'busy-1' });
    // The second call met the first one's claim, and retries instead of throwing a ConflictError.
    await eventually(async () => statuses.includes(409), 10_000);
    holding = false;
    for (const res of held.splice(0)) res.socket?.destroy();
    const [a, b] = await Promise.all([first, second]);
    expect(b).toEqual(a);
    expect((await svc.mcpServers.list().page()).data.map((m) => m.id)).toEqual([a.id]);
  } finally {
    slow.closeAllConnections();
    await new Promise((r) => slow.close(r));
  }
});

describe('client behaviour', () => {
  let server: Server;
  let url: string;
  const answers: Array<(req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) => void> = [];
  const seen: Array<{ method: string; url: string; headers: import('node:http').IncomingHttpHeaders }> = [];
  beforeAll(async () => {
    server = createServer((req, res) => {
      seen.push({ method: req.method!, url: req.url!, headers: req.headers });
      const next = answers.shift();
      if (next) next(req, res);
      else
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ data: { ok: true }, meta: { request_id: 'r' } }));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));
  beforeEach(() => {
    seen.length = 0;
    answers.length = 0;
  });
  // The gateway's own in-progress refusal under /api/v1: code CONFLICT, the reason in details.
  const inProgress = idempotencyErrors.inProgress();
  const IN_PROGRESS = JSON.stringify({
    error: { code: inProgress.code, message: inProgress.message, details: inProgress.details },
    meta: {},
  });
  const error =
    (status: number, code: string, headers: Record<string, string> = {}) =>
    (_req: unknown, res: import('node:http').ServerResponse) =>
      res
        .writeHead(status, { 'content-type': 'application/json', 'x-request-id': `req-${status}`, ...headers })
        .end(
          JSON.stringify({ error: { code, message: `failed ${status}`, details: { why: code } }, meta: { request_id: `req-${status}` } }),
        );

  it('retries 429 and 503 after Retry-After, then answers; gives up after maxRetries with a typed error', async () => {
    answers.push(error(429, 'RATE_LIMIT_EXCEEDED', { 'retry-after': '0' }), error(503, 'SERVICE_UNAVAILABLE', { 'retry-after': '0' }));
    const c = new SvcClient({ baseUrl: url, apiKey: 'svc_sdk_x' });
    expect(await c.getTenant()).toEqual({ ok: true });
    expect(seen).toHaveLength(3);
    answers.push(...Array.from({ length: 3 }, () => error(503, 'SERVICE_UNAVAILABLE', { 'retry-after': '0' })));
    const err = await new SvcClient({ baseUrl: url, apiKey: 'k', maxRetries: 2 }).getTenant().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({
      status: 503,
      code: 'SERVICE_UNAVAILABLE',
      requestId: 'req-503',
      details: { why: 'SERVICE_UNAVAILABLE' },
      retryAfterMs: 0,
    });
  });

  it('keeps the token in memory, treats it as expired 60 s early, and calls exchange when missing or expired', async () => {
    let now = 1_000_000;
    let exchanges = 0;
    const c = new SvcClient({
      baseUrl: url,
      now: () => now,
      exchange: async () => ({ accessToken: `tok-${++exchanges}`, expiresIn: 120 }),
    });
    await c.getTenant(); // no token: exchange
    await c.getTenant(); // fresh: no exchange
    now += 59_000; // 61 s left: still fresh
    await c.getTenant();
    now += 2_000; // 59 s left: treated as expired
    await c.getTenant();
    expect(exchanges).toBe(2);
    expect(seen.map((s) => s.headers.authorization)).toEqual(['Bearer tok-1', 'Bearer tok-1', 'Bearer tok-1', 'Bearer tok-2']);
  });

  it('calls onUnauthorized on a 401 and drops the token', async () => {
    const seen401: ApiError[] = [];
    const c = new SvcClient({ baseUrl: url, token: { accessToken: 'old' }, onUnauthorized: (e) => seen401.push(e) });
    answers.push(error(401, 'UNAUTHORIZED'));
    await expect(c.getTenant()).rejects.toMatchObject({ status: 401, code: 'UNAUTHORIZED', requestId: 'req-401' });
    expect(seen401).toHaveLength(1);
    await c.getTenant();
    expect(seen[1].headers.authorization).toBeUndefined();
  });

  it("sends one Idempotency-Key per POST, the same on each retry (the caller's when given), none on a GET", async () => {
    answers.push(error(503, 'SERVICE_UNAVAILABLE', { 'retry-after': '0' }));
    const c = new SvcClient({ baseUrl: url, apiKey: 'k' });
    await c.projects.create({ name: 'p' });
    await c.billing.credits.purchase({ credits: 5 });
    await c.agents.runs.create('agt_1', { goal: 'g', projectId: 'prj_1' }, { idempotencyKey: 'mine-1' });
    await c.projects.retrieve('prj_1');
    // The lower layer, for any path: the same headers.
    expect(await c.request('POST', 'projects', { body: { name: 'q' } }, { idempotencyKey: 'mine-2' })).toEqual({ ok: true });
    expect(await c.request('GET', '/tenant', { query: { a: 1 } })).toEqual({ ok: true });
    const keys = seen.map((s) => s.headers['idempotency-key']);
    expect(keys[0]).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(keys[1]).toBe(keys[0]);
    expect(new Set([keys[0], keys[2]]).size).toBe(2);
    expect(keys.slice(3)).toEqual(['mine-1', undefined, 'mine-2', undefined]);
    expect(seen.map((s) => `${s.method} ${s.url}`)).toEqual([
      'POST /api/v1/projects',
      'POST /api/v1/projects',
      'POST /api/v1/billing/credits/purchase',
      'POST /api/v1/agents/agt_1/execute',
      'GET /api/v1/projects/prj_1',
      'POST /api/v1/projects',
      'GET /api/v1/tenant?a=1',
    ]);
  });

  it('throws the error class of each status, all SvcErrors with status, code, details and requestId', async () => {
    const classes = [
      [400, BadRequestError],
      [401, AuthenticationError],
      [403, PermissionDeniedError],
      [404, NotFoundError],
      [409, ConflictError],
      [422, UnprocessableEntityError],
      [429, RateLimitError],
      [500, InternalServerError],
      [418, APIError],
    ] as const;
    const c = new SvcClient({ baseUrl: url, apiKey: 'k', maxRetries: 0 });
    for (const [status, Class] of classes) {
      answers.push(error(status, `CODE_${status}`));
      const err = await c.tenant.retrieve().catch((e: unknown) => e);
      expect([status, err]).toEqual([status, expect.any(Class)]);
      expect(err).toBeInstanceOf(SvcError);
      expect(err).toMatchObject({ status, code: `CODE_${status}`, details: { why: `CODE_${status}` }, requestId: `req-${status}` });
    }
    // The earlier names still catch them.
    expect(new NotFoundError(404, 'X', 'x')).toBeInstanceOf(ApiError);
  });

  it('retries 408, 409 idempotency_key_in_progress, 429, 5xx and a dropped connection; not a 409 conflict nor a 400', async () => {
    const c = new SvcClient({ baseUrl: url, apiKey: 'k', maxRetries: 6 });
    answers.push(
      (_req, res) => res.socket!.destroy(), // first: the only wait without Retry-After (jittered 375-500 ms)
      error(408, 'REQUEST_TIMEOUT', { 'retry-after': '0' }),
      error(409, 'idempotency_key_in_progress', { 'retry-after': '0' }), // /v1: OpenAI's shape, the reason as the code
      (_req, res) => res.writeHead(409, { 'content-type': 'application/json', 'retry-after': '0' }).end(IN_PROGRESS), // /api/v1
      error(429, 'RATE_LIMIT_EXCEEDED', { 'retry-after': '0' }),
      error(502, 'BAD_GATEWAY', { 'retry-after-ms': '1' }),
    );
    expect(await c.projects.create({ name: 'p' })).toEqual({ ok: true });
    expect(seen).toHaveLength(7);
    expect(new Set(seen.map((s) => s.headers['idempotency-key'])).size).toBe(1);
    answers.push(error(409, 'CONFLICT', { 'retry-after': '0' }), error(400, 'VALIDATION_ERROR', { 'retry-after': '0' }));
    await expect(c.projects.create({ name: 'p' })).rejects.toBeInstanceOf(ConflictError);
    await expect(c.projects.create({ name: 'p' })).rejects.toBeInstanceOf(BadRequestError);
    expect(seen).toHaveLength(9);
  });

  it('honours maxRetries per call and a dropped connection is an APIConnectionError once retries run out', async () => {
    const c = new SvcClient({ baseUrl: url, apiKey: 'k', maxRetries: 5 });
    answers.push(...Array.from({ length: 2 }, () => error(503, 'SERVICE_UNAVAILABLE', { 'retry-after': '0' })));
    await expect(c.tenant.retrieve({ maxRetries: 1 })).rejects.toMatchObject({ status: 503, constructor: InternalServerError });
    expect(seen).toHaveLength(2);
    answers.push((_req, res) => res.socket!.destroy());
    const err = await c.tenant.retrieve({ maxRetries: 0 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(APIConnectionError);
    expect(err).toMatchObject({ status: undefined, code: 'CONNECTION_ERROR', requestId: null });
  });

  it('times out an attempt after `timeout` ms (client-wide or per call) with an APITimeoutError, then retries it', async () => {
    const hang = () => undefined; // never answers: the client's abort closes the connection
    answers.push(hang);
    const c = new SvcClient({ baseUrl: url, apiKey: 'k', timeout: 100, maxRetries: 0 });
    const err = await c.tenant.retrieve().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(APITimeoutError);
    expect(err).toBeInstanceOf(APIConnectionError);
    expect(err).toMatchObject({ code: 'TIMEOUT' });
    // A timed-out attempt is retried: the second answers.
    answers.push(hang);
    expect(await new SvcClient({ baseUrl: url, apiKey: 'k' }).tenant.retrieve({ timeout: 100, maxRetries: 1 })).toEqual({ ok: true });
    expect(seen).toHaveLength(3);
  });

  it('pages a list: .page() for one page, for await for every item, the cursor passed along', async () => {
    const page = (ids: string[], next: string | null) => (_req: unknown, res: import('node:http').ServerResponse) =>
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          data: ids.map((id) => ({ id })),
          meta: { request_id: 'r', pagination: { limit: 2, next_cursor: next, has_more: !!next } },
        }),
      );
    answers.push(page(['a', 'b'], 'c1'), page(['c'], null));
    const c = new SvcClient({ baseUrl: url, apiKey: 'k' });
    const ids: string[] = [];
    for await (const p of c.projects.list({ limit: 2 })) ids.push(p.id);
    expect(ids).toEqual(['a', 'b', 'c']);
    answers.push(page(['a', 'b'], 'c1'), page(['c'], null));
    const first = await c.projects.list({ limit: 2 }).page();
    expect(first).toMatchObject({ data: [{ id: 'a' }, { id: 'b' }], hasMore: true, nextCursor: 'c1', requestId: 'r' });
    expect((await first.nextPage()).data).toEqual([{ id: 'c' }]);
    expect(seen.map((s) => s.url)).toEqual([
      '/api/v1/projects?limit=2',
      '/api/v1/projects?limit=2&cursor=c1',
      '/api/v1/projects?limit=2',
      '/api/v1/projects?limit=2&cursor=c1',
    ]);
  });

  it('resumes a dropped chat stream with Last-Event-ID: no event lost or repeated', async () => {
    answers.push((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('id: m:1\nevent: message.delta\ndata: {"messageId":"m","delta":"Hel"}\n\n');
      res.write('id: m:2\nevent: message.delta\ndata: {"messageId":"m","delta":"lo"}\n\n');
      setTimeout(() => res.socket!.destroy(), 50); // the connection drops mid-reply
    });
    answers.push((req, res) => {
      expect(req.headers['last-event-id']).toBe('m:2');
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(': keep-alive\n\n');
      res.write('id: m:3\nevent: message.delta\ndata: {"messageId":"m","delta":" there"}\n\n');
      res.end('id: m:4\nevent: message.completed\ndata: {"message":{"id":"m","status":"completed"}}\n\n');
    });
    const c = new SvcClient({ baseUrl: url, apiKey: 'k' });
    const events = [];
    for await (const e of c.chat.sessions.stream('ses_x')) events.push(e);
    expect(events.map((e) => (e.type === 'delta' ? e.delta : e.type))).toEqual(['Hel', 'lo', ' there', 'completed']);
    expect(seen.map((s) => s.url)).toEqual(['/api/v1/chat/sessions/ses_x/stream', '/api/v1/chat/sessions/ses_x/stream']);
  });
  it('streams a /v1 response and resumes it after a drop with starting_after: no event lost or repeated', async () => {
    const sse = (type: string, seq: number | null, extra: object = {}) =>
      `event: ${type}\ndata: ${JSON.stringify({ type, ...(seq === null ? {} : { sequence_number: seq }), ...extra })}\n\n`;
    answers.push((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(sse('response.created', 0, { response: { id: 'resp_1', status: 'in_progress' } }));
      res.write(sse('response.output_text.delta', 1, { delta: 'Hel' }));
      // The gateway's own link breaks: an unnumbered error, then the end.
      res.end(sse('error', null, { code: 'service_unavailable', message: 'resume with starting_after' }));
    });
    answers.push((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(sse('response.output_text.delta', 2, { delta: 'lo' }));
      res.write(sse('response.completed', 3, { response: { id: 'resp_1', status: 'completed' } }));
      setTimeout(() => res.end(), 5_000).unref(); // the SDK stops at the last event, without waiting for the end
    });
    const c = new SvcClient({ baseUrl: url, apiKey: 'k' });
    const events = [];
    for await (const e of c.v1.responses.stream({ model: 'gpt-fake', input: 'hi' })) events.push(e);
    expect(events.map((e) => [e.event, e.data.sequence_number])).toEqual([
      ['response.created', 0],
      ['response.output_text.delta', 1],
      ['response.output_text.delta', 2],
      ['response.completed', 3],
    ]);
    expect(seen.map((s) => `${s.method} ${s.url}`)).toEqual([
      'POST /v1/responses',
      'GET /v1/responses/resp_1?stream=true&starting_after=1',
    ]);
  });
});
