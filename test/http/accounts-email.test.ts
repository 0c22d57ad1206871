import { join } from 'node:path';
import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { startGateway } from '@svc/gateway';
import { startIdentity } from '@svc/identity';
import { openSqliteStore } from '@svc/kit';
import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { emailOutbox } from '../../services/identity/src/mail/outbox';
import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { invitationByAnotherReplica } from '../helpers/invitations';
import { linkToken, startMailServer, type MailServer, type ReceivedMail } from '../helpers/smtp';
import { startStack, type Stack } from '../helpers/stack';

// Accounts over real SMTP (CONTRACT.md 13): the system sends through SMTP_URL to an SMTP server in this test, and
// every link is read from a message it received. One system, with REQUIRE_VERIFIED_EMAIL on.
jest.setTimeout(60_000);

let stack: Stack;
let mail: MailServer;
let openai: FakeProviderServer;
const OPENAI_KEY = 'sk-tenant-openai-' + 'v'.repeat(32);
let api: Client;
let owner: Account;
let n = 0;

const address = (tag: string) => `${tag}-${Date.now()}-${++n}@example.com`;
const password = 'a new long password';

/** The messages received for `to`, once there are `count` of them. */
async function mailTo(to: string, count = 1): Promise<ReceivedMail[]> {
  await eventually(async () => mail.received.filter((m) => m.to === to).length >= count, 20_000);
  return mail.received.filter((m) => m.to === to);
}

async function invite(email: string, role = 'member', token = owner.accessToken) {
  return api.post('/api/v1/tenant/team/invitations', { email, role }, { token });
}

async function verify(account: Account) {
  const [message] = await mailTo(account.email);
  expect(message.subject).toBe('Verify your email address');
  return api.post('/api/v1/auth/email/verify', { token: linkToken(message, '/verify-email') });
}

beforeAll(async () => {
  mail = await startMailServer();
  openai = await startFakeOpenAI({ apiKey: OPENAI_KEY });
  stack = await startStack({
    env: { SMTP_URL: mail.url, REQUIRE_VERIFIED_EMAIL: 'true', EMAIL_FROM: 'svc <no-reply@svc.test>', EGRESS_ALLOW_PRIVATE: 'true' },
  });
  api = client(stack.url);
  owner = await signUp(api, 'Accounts');
  expect((await verify(owner)).status).toBe(200);
});
afterAll(async () => {
  await stack?.stop();
  await mail?.close();
  await openai?.close();
});

describe('email verification', () => {
  it('sign-up emails a one-time link; until it is opened, REQUIRE_VERIFIED_EMAIL refuses keys and model calls', async () => {
    const fresh = await signUp(api, 'Unverified');
    expect((await api.get('/api/v1/auth/me', { token: fresh.accessToken })).body.data.user.emailVerified).toBe(false);
    const key = await api.post('/api/v1/api-keys', { name: 'k', type: 'sdk', environment: 'development' }, { token: fresh.accessToken });
    expect(expectError(key, 403, 'FORBIDDEN').details.reason).toBe('email_not_verified');
    const call = () => api.post('/api/v1/chat/sessions/ses_0000000000/messages', { content: 'hi' }, { token: fresh.accessToken });
    expect(expectError(await call(), 403, 'FORBIDDEN').details.reason).toBe('email_not_verified');

    const [message] = await mailTo(fresh.email);
    const token = linkToken(message, '/verify-email');
    expect((await api.post('/api/v1/auth/email/verify', { token })).body.data).toEqual({ verified: true });
    expect((await api.get('/api/v1/auth/me', { token: fresh.accessToken })).body.data.user.emailVerified).toBe(true);
    // The token minted before verification still says "unverified": the gateway asks again and lets it through.
    expect((await call()).status).toBe(404);
    const again = await api.post('/api/v1/api-keys', { name: 'k', type: 'sdk', environment: 'development' }, { token: fresh.accessToken });
    expect(again.status).toBe(201);
    expect(expectError(await api.post('/api/v1/auth/email/verify', { token }), 410, 'GONE').details.reason).toBe('token_not_valid');
  });
});

describe('email verification over /mcp', () => {
  /**
   * A key its unverified user made before REQUIRE_VERIFIED_EMAIL was on: made through an identity replica and a
   * gateway that do not have the setting yet (a rollout), on the stack's store, then retired.
   */
  async function keyMadeBeforeTheSetting(account: Account): Promise<string> {
    const identity = await startIdentity({ ...stack.env, IDENTITY_PORT: '0', REQUIRE_VERIFIED_EMAIL: 'false' });
    const gateway = await startGateway({
      ...stack.env,
      IDENTITY_ADDR: `127.0.0.1:${identity.port}`,
      REQUIRE_VERIFIED_EMAIL: 'false',
      INSTANCE_ID: 'gw-before-the-setting',
    });
    try {
      return (await createKey(client(gateway.url), account.accessToken)).key;
    } finally {
      await gateway.stop();
      await identity.stop();
    }
  }

  it("run_agent by an unverified user's key is refused with email_not_verified and starts no run; after verifying, it runs", async () => {
    const fresh = await signUp(api, 'Early key');
    const key = await keyMadeBeforeTheSetting(fresh);
    const token = fresh.accessToken;
    // What is not a model call stays open to an unverified user.
    const settings = { provider: 'openai', model: 'gpt-fake', baseUrl: openai.url, apiKey: OPENAI_KEY };
    expect((await api.patch('/api/v1/tenant/settings/llm', settings, { token })).status).toBe(200);
    const projectId = (await api.post('/api/v1/projects', { name: 'Early site' }, { token })).body.data.id;
    const agentId = (await api.post('/api/v1/agents', { name: 'early', config: { autonomyLevel: 'autonomous' } }, { token })).body.data.id;

    const mcp = new McpClient({ name: 'verified-email-test', version: '1.0.0' });
    await mcp.connect(
      new StreamableHTTPClientTransport(new URL(`${stack.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${key}` } } }),
    );
    try {
      const listed = (await mcp.callTool({ name: 'list_agents', arguments: {} })) as any;
      expect(listed.isError).toBeFalsy();
      expect(listed.structuredContent.agents.map((a: { id: string }) => a.id)).toEqual([agentId]);
      const projects = (await mcp.callTool({ name: 'list_projects', arguments: {} })) as any;
      expect(projects.structuredContent.projects.map((p: { id: string }) => p.id)).toEqual([projectId]);

      const modelRequests = openai.requests.length;
      const run = () => mcp.callTool({ name: 'run_agent', arguments: { agentId, projectId, goal: 'Say hello over MCP' } }) as Promise<any>;
      const refused = await run();
      expect(refused.isError).toBe(true);
      expect(JSON.parse(refused.content[0].text).error).toMatchObject({ code: 'FORBIDDEN', details: { reason: 'email_not_verified' } });
      // The REST route the tool mirrors refuses the same key the same way.
      const rest = await api.post(`/api/v1/agents/${agentId}/execute`, { goal: 'Say hello', projectId }, { token: key });
      expect(expectError(rest, 403, 'FORBIDDEN').details.reason).toBe('email_not_verified');
      expect((await api.get(`/api/v1/agents/${agentId}/runs`, { token })).body.data).toEqual([]);
      expect(openai.requests.length).toBe(modelRequests);

      expect((await verify(fresh)).status).toBe(200);
      openai.script({ type: 'text', text: 'Hello once verified.' });
      const ran = await run();
      expect(ran.isError).toBeFalsy();
      expect(ran.structuredContent).toMatchObject({ agentId, status: 'completed', output: 'Hello once verified.' });
      const runs = (await api.get(`/api/v1/agents/${agentId}/runs`, { token })).body.data;
      expect(runs.map((r: { id: string }) => r.id)).toEqual([ran.structuredContent.runId]);
    } finally {
      await mcp.close();
    }
  });
});

describe('invitations', () => {
  it('an invitee opens the emailed link, sets a name and password, and joins with the role; the link works once', async () => {
    const email = address('invitee');
    const created = await invite(email, 'admin');
    expect(created.status).toBe(201);
    expect(created.body.data).toEqual({
      id: expect.stringMatching(/^inv_/),
      email,
      role: 'admin',
      status: 'pending',
      expiresAt: expect.stringMatching(/Z$/),
      createdAt: expect.stringMatching(/Z$/),
    });
    // INVITATION_TTL_HOURS defaults to 72.
    const ttlH = (Date.parse(created.body.data.expiresAt) - Date.parse(created.body.data.createdAt)) / 3_600_000;
    expect(Math.round(ttlH)).toBe(72);
    const [message] = await mailTo(email);
    expect(message.messageId).toMatch(/^<eml_[0-9A-Za-z]+@svc\.test>$/);
    const token = linkToken(message, '/invitations');

    const accepted = await api.post('/api/v1/auth/invitations/accept', { token, name: 'Ada', password });
    expect(accepted.status).toBe(200);
    expect(accepted.body.data.user).toMatchObject({ email, name: 'Ada', role: 'admin', emailVerified: true });
    expect(accepted.body.data.tenant.id).toBe(owner.tenantId);
    expect(accepted.headers.get('set-cookie')).toMatch(/^svc_session=/);
    const login = await api.post('/api/v1/auth/login', { email, password });
    expect(login.body.data.user.role).toBe('admin');
    const members = await api.get('/api/v1/tenant/team/members', { token: login.body.data.accessToken });
    expect(members.body.data.map((m: { email: string }) => m.email)).toContain(email);

    const reused = await api.post('/api/v1/auth/invitations/accept', { token, name: 'Eve', password });
    expect(expectError(reused, 410, 'GONE').details.reason).toBe('invitation_not_valid');
    const list = await api.get('/api/v1/tenant/team/invitations', { token: owner.accessToken });
    expect(list.body.data.find((i: { id: string }) => i.id === created.body.data.id).status).toBe('accepted');
  });

  it('a revoked invitation is refused; members cannot invite; other tenants do not see it', async () => {
    const email = address('revoked');
    const id = (await invite(email)).body.data.id;
    const token = linkToken((await mailTo(email))[0], '/invitations');
    const revoked = await api.del(`/api/v1/tenant/team/invitations/${id}`, { token: owner.accessToken });
    expect(revoked.body.data).toMatchObject({ id, status: 'revoked' });
    const refused = await api.post('/api/v1/auth/invitations/accept', { token, name: 'Mallory', password });
    expect(expectError(refused, 410, 'GONE').details.reason).toBe('invitation_not_valid');

    const other = await signUp(api, 'Other');
    expectError(await api.del(`/api/v1/tenant/team/invitations/${id}`, { token: other.accessToken }), 404, 'RESOURCE_NOT_FOUND');
    expect((await api.get('/api/v1/tenant/team/invitations', { token: other.accessToken })).body.data).toEqual([]);
    const memberEmail = address('member');
    await invite(memberEmail, 'member');
    const memberToken = linkToken((await mailTo(memberEmail))[0], '/invitations');
    const member = (await api.post('/api/v1/auth/invitations/accept', { token: memberToken, name: 'M', password })).body.data;
    expectError(await invite(address('x'), 'member', member.accessToken), 403, 'FORBIDDEN');
    expectError(await api.post('/api/v1/auth/invitations/accept', { token: 'x'.repeat(43), name: 'N', password }), 410, 'GONE');
  });

  it('a retried send carries the same Message-ID', async () => {
    const email = address('flaky');
    mail.refuseOnce.add(email);
    await invite(email);
    const [message] = await mailTo(email);
    expect(mail.refused).toContain(message.messageId);
  });
});

describe('the email outbox', () => {
  // One fixture run (its start is the slow part) for both: its invitation expires within a millisecond.
  // The identity process itself SIGKILLed in the middle of a send, then restarted: test/e2e/supervision.test.ts.
  it('another identity replica SIGKILLed right after the invitation commits: the email is still sent, once; its expired link is refused', async () => {
    const email = address('crash');
    await invitationByAnotherReplica(stack.dataDir, owner, email, '0.0000003', 'after-commit');
    const [message] = await mailTo(email);
    expect(message.subject).toBe('You are invited to Accounts');
    // Sent means deleted from the outbox: nothing is left that could send it again.
    const store = await openSqliteStore({ path: join(stack.dataDir, 'identity.db') });
    try {
      await eventually(async () => (await store.collection(emailOutbox).find({}, { limit: 10 })).items.every((e) => e.to !== email));
    } finally {
      await store.close();
    }
    expect(mail.received.filter((m) => m.to === email)).toHaveLength(1);

    const refused = await api.post('/api/v1/auth/invitations/accept', {
      token: linkToken(message, '/invitations'),
      name: 'Late',
      password,
    });
    expect(expectError(refused, 410, 'GONE').details.reason).toBe('invitation_not_valid');
    const list = (await api.get('/api/v1/tenant/team/invitations', { token: owner.accessToken })).body.data;
    expect(list.find((i: { email: string }) => i.email === email).status).toBe('expired');
  });
});

describe('password reset', () => {
  it('the link works once and ends every session; an unknown address gets the same 202 and no email', async () => {
    const user = await signUp(api, 'Reset');
    const unknown = address('nobody');
    const forgotUnknown = await api.post('/api/v1/auth/password/forgot', { email: unknown });
    const forgot = await api.post('/api/v1/auth/password/forgot', { email: user.email });
    expect([forgot.status, forgot.body.data]).toEqual([202, { accepted: true }]);
    expect([forgotUnknown.status, forgotUnknown.body.data]).toEqual([202, { accepted: true }]);
    // Emails go out in the order they were queued: the unknown address would have had its email before this one.
    const reset = (await mailTo(user.email, 2)).find((m) => m.subject === 'Reset your password')!;
    expect(mail.received.some((m) => m.to === unknown)).toBe(false);

    const token = linkToken(reset, '/reset-password');
    expect((await api.post('/api/v1/auth/password/reset', { token, password })).body.data).toEqual({ reset: true });
    expectError(await api.post('/api/v1/auth/refresh', { refreshToken: user.refreshToken }), 401, 'UNAUTHORIZED');
    await eventually(async () => (await api.get('/api/v1/auth/me', { token: user.accessToken })).status === 401);
    expect((await api.get('/api/v1/auth/me', { cookie: user.cookie })).status).toBe(401);
    expectError(await api.post('/api/v1/auth/login', { email: user.email, password: user.password }), 401, 'UNAUTHORIZED');
    const login = await api.post('/api/v1/auth/login', { email: user.email, password });
    expect(login.status).toBe(200);
    expect((await api.get('/api/v1/auth/me', { token: login.body.data.accessToken })).status).toBe(200);
    const again = await api.post('/api/v1/auth/password/reset', { token, password: 'yet another password' });
    expect(expectError(again, 410, 'GONE').details.reason).toBe('token_not_valid');

    const actions = async () =>
      (await api.get('/api/v1/audit-log?limit=100', { token: login.body.data.accessToken })).body.data.map(
        (e: { action: string }) => e.action,
      );
    await eventually(async () => (await actions()).includes('password.reset'));
  });
});
