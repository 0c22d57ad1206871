import Database from 'better-sqlite3';
import { type ReceivedMessage } from '@svc/kit';
import { decodeDomainEvent, TOPICS } from '@svc/contracts';
import { join } from 'node:path';
import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startReceiver, verifyByHand, verifyWithStandardWebhooks, type Receiver } from '../helpers/receiver';
import { stackBus, startStack, type Stack } from '../helpers/stack';

// Short retry schedule (three attempts 200 ms apart) and a 2 s attempt timeout.
let stack: Stack;
let api: Client;
let receiver: Receiver;
let owner: Account;

beforeAll(async () => {
  stack = await startStack({ env: { WEBHOOK_RETRY_SCHEDULE: '0.2,0.2', WEBHOOK_TIMEOUT_MS: '2000' } });
  api = client(stack.url);
  receiver = await startReceiver();
  owner = await signUp(api, 'Hooks');
});
afterAll(async () => {
  await receiver.close();
  await stack.stop();
});

const W = '/api/v1/webhooks';
const SECRET = 'whsec-test-secret-ünïcode';

async function register(account: Account, path: string, events: string[], secret = SECRET) {
  const res = await api.post(W, { url: `${receiver.url}${path}`, events, secret }, { token: account.accessToken });
  if (res.status !== 201) throw new Error(`registration failed: ${res.status} ${res.text}`);
  return res.body.data as { id: string; url: string; events: string[]; active: boolean };
}

async function deliveriesOf(account: Account, webhookId: string) {
  const res = await api.get(`${W}/${webhookId}/deliveries?limit=100`, { token: account.accessToken });
  expect(res.status).toBe(200);
  return res.body.data as Array<{
    id: string;
    eventId: string;
    eventType: string;
    status: string;
    attempts: any[];
    nextAttemptAt: string | null;
  }>;
}

describe('webhook registrations', () => {
  it('creates, reads, lists, updates and deletes, never showing the secret', async () => {
    const created = await api.post(
      W,
      { url: `${receiver.url}/crud`, events: ['project.created', 'project.created'], secret: SECRET },
      { token: owner.accessToken },
    );
    expect(created.status).toBe(201);
    const w = created.body.data;
    expect(w).toEqual({
      id: expect.stringMatching(/^whk_/),
      url: `${receiver.url}/crud`,
      events: ['project.created'],
      active: true,
      disabledReason: null,
      createdAt: expect.stringMatching(/Z$/),
      updatedAt: w.createdAt,
    });
    expect(created.text).not.toContain(SECRET);
    expect((await api.get(`${W}/${w.id}`, { token: owner.accessToken })).body.data).toEqual(w);

    const patched = await api.patch(
      `${W}/${w.id}`,
      { events: ['project.deleted', 'user.created'], secret: 'another-secret', active: false },
      { token: owner.accessToken },
    );
    expect(patched.status).toBe(200);
    expect(patched.body.data).toMatchObject({ id: w.id, events: ['project.deleted', 'user.created'], active: false, disabledReason: null });
    expect(patched.text).not.toContain('another-secret');

    const del = await api.del(`${W}/${w.id}`, { token: owner.accessToken });
    expect(del.body.data).toEqual({ id: w.id, deleted: true });
    expect(expectError(await api.get(`${W}/${w.id}`, { token: owner.accessToken }), 404, 'RESOURCE_NOT_FOUND').details).toEqual({
      resource: 'webhook',
      id: w.id,
    });
  });

  it('lists newest first with cursor pagination', async () => {
    const t = await signUp(api, 'Many hooks');
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await register(t, `/list${i}`, ['project.created'])).id);
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const res: { body: any } = await api.get(`${W}?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, {
        token: t.accessToken,
      });
      seen.push(...res.body.data.map((x: { id: string }) => x.id));
      cursor = res.body.meta.pagination.next_cursor;
    } while (cursor);
    expect(seen).toEqual([...ids].reverse());
  });

  it('keeps the secret encrypted at rest', async () => {
    const marker = 'plaintext-marker-secret-42';
    await register(owner, '/at-rest', ['project.created'], marker);
    const db = new Database(join(stack.dataDir, 'webhooks.db'), { readonly: true });
    try {
      const rows = db.prepare(`SELECT doc FROM webhooks`).all() as Array<{ doc: string }>;
      expect(rows.length).toBeGreaterThan(0);
      expect(rows.some((r) => r.doc.includes(marker))).toBe(false);
      expect(rows.every((r) => /"secretSealed":"v1\./.test(r.doc))).toBe(true);
    } finally {
      db.close();
    }
  });

  it.each([
    ['an invalid URL', { url: 'not a url' }, 'url'],
    ['a file: URL', { url: 'file:///etc/passwd' }, 'url'],
    ['a gopher: URL', { url: 'gopher://127.0.0.1:70/x' }, 'url'],
    ['a URL with credentials', { url: 'http://user:pass@127.0.0.1/' }, 'url'],
    ['the cloud metadata address', { url: 'http://169.254.169.254/latest' }, 'url'],
    ['a host that does not resolve', { url: 'http://no-such-host.invalid/' }, 'url'],
    ['an over-long URL', { url: `http://127.0.0.1/${'a'.repeat(2100)}` }, 'url'],
    ['an unknown event name', { events: ['project.created', 'project.exploded'] }, 'events[1]'],
    ['an empty event list', { events: [] }, 'events'],
    ['a non-string event', { events: [42] }, 'events[0]'],
    ['a huge secret', { secret: 'x'.repeat(100_000) }, 'secret'],
    ['a short secret', { secret: 'short' }, 'secret'],
    ['an empty secret', { secret: '' }, 'secret'],
    ['an unknown field', { tenantId: 'ten_other' }, 'tenantId'],
  ])('refuses %s with a 400 naming the field', async (_name, change, field) => {
    const body = { url: `${receiver.url}/bad`, events: ['project.created'], secret: SECRET, ...change };
    const err = expectError(await api.post(W, body, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
    expect(err.details.fields.map((f: { field: string }) => f.field)).toContain(field);
  });

  it('checks a changed URL and event list the same way', async () => {
    const w = await register(owner, '/patch-bad', ['project.created']);
    expectError(await api.patch(`${W}/${w.id}`, { url: 'gopher://example.com/' }, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
    expectError(await api.patch(`${W}/${w.id}`, { events: ['nope'] }, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
    expectError(await api.patch(`${W}/${w.id}`, { active: 'yes' }, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
    expectError(await api.get(`${W}?cursor=garbage`, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
    expect((await api.get(`${W}/${w.id}`, { token: owner.accessToken })).body.data.url).toBe(`${receiver.url}/patch-bad`);
  });

  it('needs a credential without a scope list', async () => {
    const scoped = await createKey(api, owner.accessToken, { scopes: ['projects:read', 'projects:write'] });
    const unscoped = await createKey(api, owner.accessToken);
    expectError(await api.get(W, { token: scoped.key }), 403, 'FORBIDDEN');
    expectError(
      await api.post(W, { url: `${receiver.url}/k`, events: ['project.created'], secret: SECRET }, { token: scoped.key }),
      403,
      'FORBIDDEN',
    );
    expect((await api.get(W, { token: unscoped.key })).status).toBe(200);
    expectError(await api.get(W), 401, 'UNAUTHORIZED');
  });
});

describe('delivery', () => {
  it('signs and delivers exactly the subscribed events of its own tenant, in order', async () => {
    const tenant = await signUp(api, 'Receiver tenant');
    const other = await signUp(api, 'Noisy neighbour');
    const hook = await register(tenant, '/mine', ['project.created', 'project.deleted', 'user.created']);
    await register(other, '/theirs', ['project.created', 'project.updated', 'project.deleted', 'user.created']);
    const token = tenant.accessToken;

    const p = (await api.post('/api/v1/projects', { name: 'Alpha', description: 'd', language: 'ts' }, { token })).body.data;
    await api.patch(`/api/v1/projects/${p.id}`, { name: 'Alpha 2' }, { token }); // not subscribed
    await api.del(`/api/v1/projects/${p.id}`, { token });
    const member = await api.post(
      '/api/v1/tenant/team/members',
      { email: `m${Date.now()}@example.com`, name: 'Mem', role: 'member', password: 'password123' },
      { token },
    );
    expect(member.status).toBe(201);
    await api.post('/api/v1/projects', { name: 'Foreign' }, { token: other.accessToken });
    const last = (await api.post('/api/v1/projects', { name: 'Last' }, { token })).body.data;

    // One service's events reach a registration in their order; events of two services (projects, identity) have
    // no order between them on Kafka (two topics), so the member's user.created is looked for on its own. The
    // owner's own user.created came before the registration: not delivered.
    await eventually(async () => receiver.at('/mine').length >= 4, 10_000);
    await new Promise((r) => setTimeout(r, 300)); // nothing more comes
    const got = receiver.at('/mine');
    expect(got.filter((r) => r.json.type.startsWith('project.')).map((r) => [r.json.type, r.json.data.id])).toEqual([
      ['project.created', p.id],
      ['project.deleted', p.id],
      ['project.created', last.id],
    ]);
    expect(got.map((r) => r.json.type).sort()).toEqual(['project.created', 'project.created', 'project.deleted', 'user.created']);
    expect(got.every((r) => r.json.tenantId === tenant.tenantId)).toBe(true);
    const created = got.find((r) => r.json.type === 'project.created')!;
    expect(created.json).toEqual({
      id: expect.stringMatching(/^evt_/),
      type: 'project.created',
      createdAt: expect.stringMatching(/Z$/),
      tenantId: tenant.tenantId,
      data: { id: p.id, name: 'Alpha', description: 'd', language: 'ts', created_at: p.created_at, updated_at: p.updated_at },
    });
    expect(got.find((r) => r.json.type === 'project.deleted')!.json.data).toEqual({ id: p.id });
    expect(got.find((r) => r.json.type === 'user.created')!.json.data).toEqual({
      id: member.body.data.userId,
      email: member.body.data.email,
      name: 'Mem',
      role: 'member',
      createdAt: expect.any(String),
    });

    for (const r of got) {
      expect(r.headers['content-type']).toBe('application/json');
      expect(r.headers['user-agent']).toMatch(/^svc-webhooks\//);
      expect(r.headers['webhook-id']).toBe(r.json.id);
      expect(Math.abs(Number(r.headers['webhook-timestamp']) - Date.now() / 1000)).toBeLessThan(60);
      expect(verifyByHand(r, SECRET)).toBe(true);
      expect(verifyByHand(r, 'some other secret')).toBe(false);
      expect(verifyWithStandardWebhooks(r, SECRET)).toEqual(r.json);
      expect(() => verifyWithStandardWebhooks({ ...r, body: r.body.replace('"type"', '"kind"') }, SECRET)).toThrow();
    }
    // The neighbour's events went to the neighbour only.
    await eventually(async () => receiver.at('/theirs').some((r) => r.json?.data?.name === 'Foreign'));
    expect(receiver.at('/theirs').every((r) => r.json.tenantId === other.tenantId)).toBe(true);

    // Every one listed. (In id order, which is creation time to the millisecond: deliveries fanned out from one batch
    // of events share it, so the order they were sent in is the receiver's, pinned above.)
    const list = await deliveriesOf(tenant, hook.id);
    expect(list.map((d) => d.eventType).sort()).toEqual(['project.created', 'project.created', 'project.deleted', 'user.created']);
    expect(list.every((d) => d.status === 'succeeded' && d.attempts.length === 1 && d.nextAttemptAt === null)).toBe(true);
    expect(list[0].attempts[0]).toEqual({
      number: 1,
      at: expect.any(String),
      statusCode: 200,
      latencyMs: expect.any(Number),
      error: null,
      responseExcerpt: 'ok',
    });
  });

  it('retries after a 500 with the same webhook-id and records every attempt', async () => {
    const t = await signUp(api, 'Flaky');
    const hook = await register(t, '/flaky', ['project.created']);
    let calls = 0;
    const previous = receiver.answer;
    receiver.answer = (r) => (r.path === '/flaky' && ++calls === 1 ? { status: 500, body: 'boom '.repeat(400) } : previous(r));
    try {
      await api.post('/api/v1/projects', { name: 'Retry me' }, { token: t.accessToken });
      await eventually(async () => (await deliveriesOf(t, hook.id))[0]?.status === 'succeeded', 10_000);
    } finally {
      receiver.answer = previous;
    }
    const got = receiver.at('/flaky');
    expect(got).toHaveLength(2);
    expect(got[1].headers['webhook-id']).toBe(got[0].headers['webhook-id']);
    expect(got[1].body).toBe(got[0].body);
    const [d] = await deliveriesOf(t, hook.id);
    expect(d.attempts.map((a) => [a.number, a.statusCode])).toEqual([
      [1, 500],
      [2, 200],
    ]);
    expect(Buffer.byteLength(d.attempts[0].responseExcerpt)).toBe(1024);
    expect(d.attempts[0].responseExcerpt.startsWith('boom boom')).toBe(true);
  });

  it('fails a delivery past the schedule, disables the webhook and says why; test and re-send still reach it', async () => {
    const t = await signUp(api, 'Broken receiver');
    const hook = await register(t, '/down', ['project.created']);
    let up = false;
    const previous = receiver.answer;
    receiver.answer = (r) => (r.path === '/down' ? (up ? { status: 204 } : { status: 503, body: 'down' }) : previous(r));
    try {
      await api.post('/api/v1/projects', { name: 'Never delivered' }, { token: t.accessToken });
      await eventually(async () => (await api.get(`${W}/${hook.id}`, { token: t.accessToken })).body.data.active === false, 10_000);
      const disabled = (await api.get(`${W}/${hook.id}`, { token: t.accessToken })).body.data;
      expect(disabled.disabledReason).toMatch(/failed/);
      const [failed] = await deliveriesOf(t, hook.id);
      expect(failed.status).toBe('failed');
      expect(failed.attempts.map((a) => a.statusCode)).toEqual([503, 503, 503]);
      expect(receiver.at('/down')).toHaveLength(3);

      // Disabled: new events are not delivered.
      await api.post('/api/v1/projects', { name: 'While disabled' }, { token: t.accessToken });

      // The receiver is fixed: a manual re-send (one attempt, same webhook-id) and a test event get through.
      up = true;
      const retry = await api.post(`${W}/${hook.id}/deliveries/${failed.id}/retry`, undefined, { token: t.accessToken });
      expect(retry.status).toBe(202);
      expect(retry.body.data).toMatchObject({ id: failed.id, status: 'pending' });
      await eventually(async () => (await deliveriesOf(t, hook.id)).find((d) => d.id === failed.id)?.status === 'succeeded');
      expect(receiver.at('/down').at(-1)!.headers['webhook-id']).toBe(failed.eventId);
      const test = await api.post(`${W}/${hook.id}/test`, undefined, { token: t.accessToken });
      expect(test.status).toBe(202);
      await eventually(async () => receiver.at('/down').some((r) => r.json?.type === 'webhook.test'));
      const testReq = receiver.at('/down').find((r) => r.json?.type === 'webhook.test')!;
      expect(testReq.json).toMatchObject({ id: test.body.data.eventId, tenantId: t.tenantId, data: { webhookId: hook.id } });
      expect(verifyWithStandardWebhooks(testReq, SECRET)).toEqual(testReq.json);
      expect(receiver.at('/down').some((r) => r.json?.data?.name === 'While disabled')).toBe(false);

      // While an attempt is under way (the receiver holds it) a second re-send is a conflict; the held attempt
      // then times out and is recorded as such.
      receiver.answer = (r) => (r.path === '/down' ? 'hold' : previous(r));
      const heldBefore = receiver.at('/down').length;
      expect((await api.post(`${W}/${hook.id}/deliveries/${failed.id}/retry`, undefined, { token: t.accessToken })).status).toBe(202);
      await eventually(async () => receiver.at('/down').length > heldBefore);
      expectError(await api.post(`${W}/${hook.id}/deliveries/${failed.id}/retry`, undefined, { token: t.accessToken }), 409, 'CONFLICT');
      await eventually(async () => (await deliveriesOf(t, hook.id)).find((d) => d.id === failed.id)?.status === 'failed', 10_000);
      const timedOut = (await deliveriesOf(t, hook.id)).find((d) => d.id === failed.id)!.attempts.at(-1);
      expect(timedOut).toMatchObject({ statusCode: null, error: expect.stringMatching(/^timeout/) });
      receiver.answer = (r) => (r.path === '/down' ? { status: 204 } : previous(r));

      const enabled = await api.patch(`${W}/${hook.id}`, { active: true }, { token: t.accessToken });
      expect(enabled.body.data).toMatchObject({ active: true, disabledReason: null });
      await api.post('/api/v1/projects', { name: 'Enabled again' }, { token: t.accessToken });
      await eventually(async () => receiver.at('/down').some((r) => r.json?.data?.name === 'Enabled again'));
    } finally {
      receiver.answer = previous;
    }
  });

  it('never makes a second delivery when the bus delivers a message again', async () => {
    const t = await signUp(api, 'Redelivered');
    const hook = await register(t, '/once', ['project.created']);
    // Everything on the projects topic, as the bus carries it (to hand a message to the consumers again on Kafka).
    const bus = stackBus(stack, 'redelivery-test');
    const carried: ReceivedMessage[] = [];
    const sub = await bus.subscribe({
      group: `redelivery-${Date.now()}`,
      topics: [TOPICS.projects],
      handler: async (m) => void carried.push(m),
    });
    try {
      const once = (await api.post('/api/v1/projects', { name: 'Once' }, { token: t.accessToken })).body.data;
      await eventually(async () => receiver.at('/once').length === 1);
      if (stack.env.KAFKA_BROKERS) {
        // Kafka: the same message (same event id) once more, as a producer retry or a rebalance before a commit would.
        const isOnce = (m: ReceivedMessage) => {
          const data = decodeDomainEvent(m.value).data;
          return data?.$case === 'project' && data.value.id === once.id;
        };
        await eventually(async () => carried.some(isOnce), 10_000);
        const original = carried.find(isOnce)!;
        await bus.publish([
          { id: original.id, topic: TOPICS.projects, key: original.key, value: original.value, headers: original.headers },
        ]);
      } else {
        // Embedded: rewind the consumer group to the start of the log, as a crash before the offset commit would.
        const db = new Database(join(stack.dataDir, 'bus.db'));
        try {
          db.pragma('busy_timeout = 5000');
          db.prepare(`UPDATE offsets SET seq = 0 WHERE grp = 'webhooks'`).run();
        } finally {
          db.close();
        }
      }
    } finally {
      await sub.stop();
      await bus.close();
    }
    const marker = (await api.post('/api/v1/projects', { name: 'After rewind' }, { token: t.accessToken })).body.data;
    await eventually(async () => receiver.at('/once').some((r) => r.json?.data?.id === marker.id), 10_000);
    expect(receiver.at('/once').map((r) => r.json.data.name)).toEqual(['Once', 'After rewind']);
    expect(await deliveriesOf(t, hook.id)).toHaveLength(2);
  });
});

describe('webhook access across tenants', () => {
  it('gives another tenant 404 on every route', async () => {
    const hook = await register(owner, '/private', ['project.created']);
    await api.post(`${W}/${hook.id}/test`, undefined, { token: owner.accessToken });
    await eventually(async () => (await deliveriesOf(owner, hook.id)).some((d) => d.status === 'succeeded'));
    const [delivery] = await deliveriesOf(owner, hook.id);
    const intruder = await signUp(api, 'Intruder');
    const token = intruder.accessToken;
    for (const res of [
      await api.get(`${W}/${hook.id}`, { token }),
      await api.patch(`${W}/${hook.id}`, { active: false }, { token }),
      await api.del(`${W}/${hook.id}`, { token }),
      await api.get(`${W}/${hook.id}/deliveries`, { token }),
      await api.post(`${W}/${hook.id}/test`, undefined, { token }),
      await api.post(`${W}/${hook.id}/deliveries/${delivery.id}/retry`, undefined, { token }),
    ]) {
      expect(expectError(res, 404, 'RESOURCE_NOT_FOUND').details).toEqual({ resource: 'webhook', id: hook.id });
    }
    // A delivery id under the wrong registration is not found either.
    const mine = await register(intruder, '/intruder', ['project.created']);
    expect(
      expectError(await api.post(`${W}/${mine.id}/deliveries/${delivery.id}/retry`, undefined, { token }), 404, 'RESOURCE_NOT_FOUND')
        .details,
    ).toEqual({
      resource: 'delivery',
      id: delivery.id,
    });
    expect((await api.get(W, { token })).body.data.map((w: { id: string }) => w.id)).toEqual([mine.id]);
    expect((await api.get(`${W}/${hook.id}`, { token: owner.accessToken })).body.data.active).toBe(true);
  });
});
