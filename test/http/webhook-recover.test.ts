import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startReceiver, verifyByHand, verifyWithStandardWebhooks, type Received, type Receiver } from '../helpers/receiver';
import { startStack, type Stack } from '../helpers/stack';

// Recovery (CONTRACT.md 10): POST /webhooks/:id/recover {since, until?} delivers once more every subscribed event of
// the window that did not reach the endpoint, with its original id, on the usual retry schedule, oldest first, and
// enables a disabled endpoint; `webhook.endpoint_disabled` and `webhook.endpoint_recovered` are public events.
// A short retry schedule (three attempts 200 ms apart) disables a failing endpoint within a second.
jest.setTimeout(90_000);

const W = '/api/v1/webhooks';
const SECRET = 'whsec-recover-secret';
let stack: Stack;
let api: Client;
let receiver: Receiver;
/** Receiver paths answering 500 for now. */
const down = new Set<string>();

beforeAll(async () => {
  [stack, receiver] = await Promise.all([
    startStack({ env: { RATE_LIMIT_MAX: '1000000', WEBHOOK_RETRY_SCHEDULE: '0.2,0.2', WEBHOOK_TIMEOUT_MS: '2000' } }),
    startReceiver(),
  ]);
  api = client(stack.url);
  receiver.answer = (r) => (down.has(r.path) ? { status: 500, body: 'down' } : { status: 200, body: 'ok' });
});
afterAll(async () => {
  await receiver.close();
  await stack.stop();
});

async function register(a: Account, path: string, events: string[]) {
  const res = await api.post(W, { url: `${receiver.url}${path}`, events, secret: SECRET }, { token: a.accessToken });
  expect(res.status).toBe(201);
  return res.body.data as { id: string };
}

const hookOf = async (a: Account, id: string) => (await api.get(`${W}/${id}`, { token: a.accessToken })).body.data;
const project = async (a: Account, name: string) => (await api.post('/api/v1/projects', { name }, { token: a.accessToken })).body.data;
const recover = (a: Account, id: string, body: unknown) => api.post(`${W}/${id}/recover`, body, { token: a.accessToken });

async function eventsOf(a: Account, query: string): Promise<any[]> {
  const out: any[] = [];
  let cursor: string | null = null;
  do {
    const res: { body: any } = await api.get(`/api/v1/events?limit=100&${query}${cursor ? `&cursor=${cursor}` : ''}`, {
      token: a.accessToken,
    });
    out.push(...res.body.data);
    cursor = res.body.meta.pagination.next_cursor;
  } while (cursor);
  return out;
}

/** Waits until none of the endpoint's deliveries is pending. */
async function settled(a: Account, hookId: string) {
  await eventually(async () => {
    const list = (await api.get(`${W}/${hookId}/deliveries?limit=100`, { token: a.accessToken })).body.data as Array<{ status: string }>;
    return list.every((d) => d.status !== 'pending');
  }, 15_000);
}

it('after an outage: exactly the missed events arrive once each, with their original ids and signatures, in order', async () => {
  const t = await signUp(api, 'Outage');
  const hook = await register(t, '/outage', ['project.created']);
  const path = '/outage';
  const before: string[] = [];
  for (let i = 0; i < 5; i++) before.push((await project(t, `before ${i}`)).id);
  await eventually(async () => receiver.at(path).length === 5, 10_000);

  // The endpoint goes down: the first deliveries fail through their schedule, the endpoint is disabled, the rest are
  // never tried.
  const since = new Date().toISOString();
  down.add(path);
  const during: string[] = [];
  for (let i = 0; i < 50; i++) during.push((await project(t, `during ${i}`)).id);
  await eventually(async () => (await hookOf(t, hook.id)).active === false, 15_000);
  await eventually(async () => (await eventsOf(t, 'type=project.created')).length === 55, 10_000);
  await settled(t, hook.id);
  const failedAttempts = receiver.at(path).length - 5;
  expect(failedAttempts).toBeGreaterThanOrEqual(3);
  const missed = (await eventsOf(t, `deliveryFailed=true&webhookId=${hook.id}`)).reverse(); // oldest first
  expect(missed.map((e) => e.data.id)).toEqual(during);

  // Back up. A first recovery stops at `until`: only what happened before it.
  down.delete(path);
  const mark = receiver.at(path).length;
  const until = missed[20].createdAt;
  const early = missed.filter((e) => e.createdAt < until);
  const first = await recover(t, hook.id, { since, until });
  expect(first.status).toBe(202);
  expect(first.body.data).toEqual({ queued: early.length });
  expect(await hookOf(t, hook.id)).toMatchObject({ active: true, disabledReason: null });
  await eventually(async () => receiver.at(path).length === mark + early.length, 15_000);
  // Then the rest, with no `until` (now): the part already recovered is not sent again.
  const rest = await recover(t, hook.id, { since });
  expect(rest.body.data).toEqual({ queued: 50 - early.length });
  await eventually(async () => receiver.at(path).length === mark + 50, 15_000);
  await new Promise((r) => setTimeout(r, 500)); // nothing more comes
  const got: Received[] = receiver.at(path).slice(mark);
  expect(got).toHaveLength(50);
  // In the order they happened, each once, with the id, the body and a signature as the original event.
  expect(got.map((r) => r.json.data.id)).toEqual(during);
  expect(got.map((r) => r.headers['webhook-id'])).toEqual(missed.map((e) => e.id));
  for (const [i, r] of got.entries()) {
    expect(r.json).toEqual(missed[i]);
    expect(verifyByHand(r, SECRET)).toBe(true);
    expect(verifyWithStandardWebhooks(r, SECRET)).toEqual(r.json);
  }
  // Nothing from before the outage came again.
  expect(got.some((r) => before.includes(r.json.data.id))).toBe(false);
  expect(await eventsOf(t, `deliveryFailed=true&webhookId=${hook.id}`)).toEqual([]);
  expect((await recover(t, hook.id, { since })).body.data).toEqual({ queued: 0 });
  // Recovered deliveries are the endpoint's ordinary deliveries, now succeeded.
  const deliveries = (await api.get(`${W}/${hook.id}/deliveries?limit=100`, { token: t.accessToken })).body.data as any[];
  expect(deliveries).toHaveLength(55);
  expect(deliveries.every((d) => d.status === 'succeeded')).toBe(true);
});

it('re-enables a disabled endpoint, which then gets its own disabled event and the recovered one; PATCH announces too', async () => {
  const t = await signUp(api, 'Operational');
  const ops = ['webhook.endpoint_disabled', 'webhook.endpoint_recovered'];
  const hook = await register(t, '/ops-endpoint', ['project.created', ...ops]);
  await register(t, '/ops-observer', ops);
  const since = new Date().toISOString();
  down.add('/ops-endpoint');
  const p = await project(t, 'lost');
  await eventually(async () => (await hookOf(t, hook.id)).active === false, 15_000);
  await eventually(async () => receiver.at('/ops-observer').length === 1, 10_000);
  const disabled = receiver.at('/ops-observer')[0].json;
  expect(disabled).toMatchObject({
    type: 'webhook.endpoint_disabled',
    tenantId: t.tenantId,
    data: { id: hook.id, url: `${receiver.url}/ops-endpoint`, active: false, disabledReason: expect.stringMatching(/failed/) },
  });
  await settled(t, hook.id);

  down.delete('/ops-endpoint');
  const mark = receiver.at('/ops-endpoint').length;
  const res = await recover(t, hook.id, { since });
  expect(res.status).toBe(202);
  expect(res.body.data).toEqual({ queued: 2 }); // the project and its own disabled event
  await eventually(async () => receiver.at('/ops-endpoint').length === mark + 3, 10_000);
  const got = receiver.at('/ops-endpoint').slice(mark);
  expect(got.map((r) => r.json.type)).toEqual(['project.created', 'webhook.endpoint_disabled', 'webhook.endpoint_recovered']);
  expect(got[0].json.data.id).toBe(p.id);
  expect(got[1].json).toEqual(disabled);
  expect(got[2].json.data).toMatchObject({ id: hook.id, active: true, disabledReason: null });
  await eventually(async () => receiver.at('/ops-observer').length === 2, 10_000);
  expect(receiver.at('/ops-observer')[1].json).toEqual(got[2].json);

  // The enable path announces it too, once; disabling by hand is not the disable rule and announces nothing.
  expect((await api.patch(`${W}/${hook.id}`, { active: false }, { token: t.accessToken })).status).toBe(200);
  expect((await api.patch(`${W}/${hook.id}`, { active: true }, { token: t.accessToken })).status).toBe(200);
  expect((await api.patch(`${W}/${hook.id}`, { active: true }, { token: t.accessToken })).status).toBe(200); // already on
  await eventually(async () => receiver.at('/ops-observer').length === 3, 10_000);
  await new Promise((r) => setTimeout(r, 500));
  expect(receiver.at('/ops-observer').map((r) => r.json.type)).toEqual([
    'webhook.endpoint_disabled',
    'webhook.endpoint_recovered',
    'webhook.endpoint_recovered',
  ]);
  // A recovery of an active endpoint with nothing missed queues nothing and announces nothing.
  expect((await recover(t, hook.id, { since })).body.data).toEqual({ queued: 0 });
  await new Promise((r) => setTimeout(r, 300));
  expect(receiver.at('/ops-observer')).toHaveLength(3);
});

describe('bad input and access', () => {
  let t: Account;
  let hookId: string;
  beforeAll(async () => {
    t = await signUp(api, 'Recover input');
    hookId = (await register(t, '/input', ['project.created'])).id;
  });

  it.each([
    ['no since', {}, 'since'],
    ['since that is not a time', { since: 'last tuesday' }, 'since'],
    ['since without a zone', { since: '2025-01-01T00:00:00' }, 'since'],
    ['until on a day that does not exist', { since: '2025-01-01T00:00:00Z', until: '2025-02-30T00:00:00Z' }, 'until'],
    ['since after until', { since: '2025-01-02T00:00:00Z', until: '2025-01-01T00:00:00Z' }, 'until'],
    ['since as a number', { since: 1735689600000 }, 'since'],
    ['an unknown field', { since: '2025-01-01T00:00:00Z', webhookId: 'whk_other' }, 'webhookId'],
  ])('refuses %s with a 400 in the envelope naming the field', async (_label, body, field) => {
    const err = expectError(await recover(t, hookId, body), 400, 'VALIDATION_ERROR');
    expect(err.details.fields.map((f: { field: string }) => f.field)).toContain(field);
  });

  it('takes an empty window (since = until) and queues nothing', async () => {
    const at = new Date().toISOString();
    expect((await recover(t, hookId, { since: at, until: at })).body.data).toEqual({ queued: 0 });
  });

  it("answers another tenant's endpoint with 404, and refuses a scoped key", async () => {
    const other = await signUp(api, 'Other');
    const err = expectError(await recover(other, hookId, { since: '2025-01-01T00:00:00Z' }), 404, 'RESOURCE_NOT_FOUND');
    expect(err.details).toEqual({ resource: 'webhook', id: hookId });
    const scoped = await createKey(api, t.accessToken, { scopes: ['events:read'] });
    expectError(await api.post(`${W}/${hookId}/recover`, { since: '2025-01-01T00:00:00Z' }, { token: scoped.key }), 403, 'FORBIDDEN');
  });
});
