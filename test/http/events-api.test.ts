import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startReceiver, type Receiver } from '../helpers/receiver';
import { readSse, type SseEvent, type SseOptions } from '../helpers/sse';
import { startStack, type Stack } from '../helpers/stack';

// The Events API (CONTRACT.md 10): GET /events and GET /events/:id show the tenant's public events exactly as their
// webhook deliveries send them, newest first, filtered by type, an exclusive window of time, or what one endpoint
// missed; kept EVENTS_RETENTION_DAYS (the webhooks service's clock is injected: moving it is how a month passes).
jest.setTimeout(90_000);

const E = '/api/v1/events';
const W = '/api/v1/webhooks';
const SECRET = 'whsec-events-api-secret';
const DAY = 86_400_000;
let stack: Stack;
let api: Client;
let receiver: Receiver;
/** Added to the webhooks service's clock (its event log's retention). */
let clockShift = 0;
/** The receiver paths that answer 503 for now. */
const down = new Set<string>();

beforeAll(async () => {
  [stack, receiver] = await Promise.all([
    startStack({
      env: {
        RATE_LIMIT_MAX: '1000000',
        WEBHOOK_RETRY_SCHEDULE: '0.2,0.2',
        WEBHOOK_TIMEOUT_MS: '2000',
        SSE_STREAMS_PER_TENANT: '3',
        SSE_KEEPALIVE_MS: '100',
      },
      webhooks: { now: () => Date.now() + clockShift },
    }),
    startReceiver(),
  ]);
  api = client(stack.url);
  receiver.answer = (r) => (down.has(r.path) ? { status: 503, body: 'down' } : { status: 200, body: 'ok' });
});
afterAll(async () => {
  await receiver.close();
  await stack.stop();
});

interface Ev {
  id: string;
  type: string;
  createdAt: string;
  tenantId: string;
  data: any;
}

/** Every page of a list, following next_cursor. */
async function walk(token: string, query = '', limit = 100): Promise<Ev[]> {
  const out: Ev[] = [];
  let cursor: string | null = null;
  do {
    const res: { status: number; body: any; text: string } = await api.get(
      `${E}?limit=${limit}${query ? `&${query}` : ''}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
      { token },
    );
    if (res.status !== 200) throw new Error(`GET /events ${query}: ${res.status} ${res.text}`);
    expect(res.body.meta.pagination.has_more).toBe(res.body.meta.pagination.next_cursor !== null);
    out.push(...res.body.data);
    cursor = res.body.meta.pagination.next_cursor;
  } while (cursor);
  return out;
}

async function register(a: Account, path: string, events: string[]) {
  const res = await api.post(W, { url: `${receiver.url}${path}`, events, secret: SECRET }, { token: a.accessToken });
  expect(res.status).toBe(201);
  return res.body.data as { id: string; createdAt: string };
}

const project = async (a: Account, name: string) => (await api.post('/api/v1/projects', { name }, { token: a.accessToken })).body.data;

/** Newest first: createdAt descending, ties by id descending. */
function expectNewestFirst(list: Ev[]) {
  for (let i = 1; i < list.length; i++) {
    const [a, b] = [list[i - 1], list[i]];
    expect(a.createdAt > b.createdAt || (a.createdAt === b.createdAt && a.id > b.id)).toBe(true);
  }
}

describe('GET /events', () => {
  it('shows each event as its webhook delivery sent it: the same id and a JSON-equal body, newest first', async () => {
    const t = await signUp(api, 'Events');
    await register(t, '/body', ['project.created', 'project.updated', 'project.deleted', 'user.created']);
    const p = await project(t, 'Shown');
    await api.patch(`/api/v1/projects/${p.id}`, { description: 'changed' }, { token: t.accessToken });
    await api.del(`/api/v1/projects/${p.id}`, { token: t.accessToken });
    const member = { email: `m${Date.now()}@example.com`, name: 'M', role: 'member', password: 'password123' };
    expect((await api.post('/api/v1/tenant/team/members', member, { token: t.accessToken })).status).toBe(201);
    await eventually(async () => receiver.at('/body').length === 4, 10_000);

    // Every delivered event is in the log once the delivery is; so are the two from before the registration, and the
    // audit log's entry of the member added (audit.entry_created, not subscribed here).
    await eventually(async () => (await walk(t.accessToken)).length === 7, 10_000);
    const list = await walk(t.accessToken);
    expectNewestFirst(list);
    expect(list.map((e) => e.type).sort()).toEqual(
      [
        'audit.entry_created',
        'project.created',
        'project.deleted',
        'project.updated',
        'tenant.created',
        'user.created',
        'user.created',
      ].sort(),
    );
    expect(list.every((e) => e.tenantId === t.tenantId)).toBe(true);
    for (const r of receiver.at('/body')) {
      expect(list.find((e) => e.id === r.json.id)).toEqual(r.json);
      const one = await api.get(`${E}/${r.json.id}`, { token: t.accessToken });
      expect(one.status).toBe(200);
      expect(one.body.data).toEqual(r.json);
    }
    const tenantCreated = list.find((e) => e.type === 'tenant.created')!;
    expect(tenantCreated.data).toEqual({ id: t.tenantId, name: 'Events', plan: 'free', createdAt: expect.any(String) });
  });

  describe('a tenant with four hundred events', () => {
    let busy: Account;
    let all: Ev[];
    beforeAll(async () => {
      busy = await signUp(api, 'Busy');
      // 200 projects created and deleted: 400 events, plus the tenant's and its owner's; eleven pages of 37.
      const queue = Array.from({ length: 200 }, (_, i) => i);
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          for (let i = queue.shift(); i !== undefined; i = queue.shift()) {
            const p = await project(busy, `p${i}`);
            expect((await api.del(`/api/v1/projects/${p.id}`, { token: busy.accessToken })).status).toBe(200);
          }
        }),
      );
      await eventually(async () => (await walk(busy.accessToken)).length === 402, 30_000, 250);
      all = await walk(busy.accessToken);
    });

    it('pages through them with a stable cursor while new events arrive: none skipped or repeated', async () => {
      expectNewestFirst(all);
      let arriving = true;
      const newer: string[] = [];
      const producer = (async () => {
        for (let i = 0; arriving && i < 60; i++) newer.push((await project(busy, `new${i}`)).id);
      })();
      const seen = await walk(busy.accessToken, '', 37);
      arriving = false;
      await producer;
      expect(newer.length).toBeGreaterThan(0);
      expect(new Set(seen.map((e) => e.id)).size).toBe(seen.length);
      expectNewestFirst(seen);
      // Everything there when the walk began is in it; anything else is one of the new events.
      const seenIds = new Set(seen.map((e) => e.id));
      expect(all.filter((e) => !seenIds.has(e.id))).toEqual([]);
      const before = new Set(all.map((e) => e.id));
      expect(seen.filter((e) => !before.has(e.id)).every((e) => e.type === 'project.created' && newer.includes(e.data.id))).toBe(true);
    });

    it('filters by type, and by a window of time whose ends are exclusive', async () => {
      const deleted = await walk(busy.accessToken, 'type=project.deleted');
      expect(deleted).toHaveLength(200);
      expect(deleted.every((e) => e.type === 'project.deleted')).toBe(true);
      expect(deleted.map((e) => e.id)).toEqual(all.filter((e) => e.type === 'project.deleted').map((e) => e.id));

      const after = all[320].createdAt;
      const before = all[80].createdAt;
      const inside = (e: Ev) => e.createdAt > after && e.createdAt < before;
      const q = `after=${encodeURIComponent(after)}&before=${encodeURIComponent(before)}`;
      const windowed = await walk(busy.accessToken, q, 50);
      expect(windowed.map((e) => e.id)).toEqual(all.filter(inside).map((e) => e.id));
      expect(windowed.length).toBeGreaterThan(120);
      // Exclusive: the events at either end's exact time are out.
      expect(windowed.some((e) => e.createdAt === after || e.createdAt === before)).toBe(false);
      const both = await walk(busy.accessToken, `${q}&type=project.created`);
      expect(both.map((e) => e.id)).toEqual(all.filter((e) => inside(e) && e.type === 'project.created').map((e) => e.id));
      // The same instant in another zone is the same window.
      const shifted = (iso: string) => new Date(Date.parse(iso)).toISOString().replace('Z', '+00:00');
      const zoned = await walk(
        busy.accessToken,
        `after=${encodeURIComponent(shifted(after))}&before=${encodeURIComponent(shifted(before))}`,
      );
      expect(zoned.map((e) => e.id)).toEqual(windowed.map((e) => e.id));
    });
  });

  it("gives another tenant's event id a 404 like a missing one, and no list shows it", async () => {
    const mine = await signUp(api, 'Mine');
    const theirs = await signUp(api, 'Theirs');
    let their: Ev[] = [];
    await eventually(async () => (their = await walk(theirs.accessToken)).length === 2, 10_000);
    const mineKey = await createKey(api, mine.accessToken);
    for (const token of [mine.accessToken, mineKey.key]) {
      for (const e of their) {
        const err = expectError(await api.get(`${E}/${e.id}`, { token }), 404, 'RESOURCE_NOT_FOUND');
        expect(err.details).toEqual({ resource: 'event', id: e.id });
      }
      const missing = 'evt_0000000000000000000000';
      const err = expectError(await api.get(`${E}/${missing}`, { token }), 404, 'RESOURCE_NOT_FOUND');
      expect(err.details).toEqual({ resource: 'event', id: missing });
      const text = (await api.get(`${E}?limit=100`, { token })).text;
      for (const e of their) expect(text).not.toContain(e.id);
      // A tenant id in the query never selects the tenant: an unknown parameter is refused.
      expectError(await api.get(`${E}?tenantId=${theirs.tenantId}`, { token }), 400, 'VALIDATION_ERROR');
    }
    expect((await api.get(`${E}/${their[0].id}`, { token: theirs.accessToken })).status).toBe(200);
  });

  it('needs events:read: a key scoped elsewhere is refused, a key with only events:read reads events and types', async () => {
    const t = await signUp(api, 'Scopes');
    let id = '';
    await eventually(async () => ((id = (await walk(t.accessToken))[0]?.id ?? ''), id !== ''), 10_000);
    const elsewhere = await createKey(api, t.accessToken, { scopes: ['projects:read'] });
    const events = await createKey(api, t.accessToken, { scopes: ['events:read'] });
    for (const path of [E, `${E}/${id}`, '/api/v1/event-types']) {
      const err = expectError(await api.get(path, { token: elsewhere.key }), 403, 'FORBIDDEN');
      expect(err.message).toMatch(/events:read/);
      expect((await api.get(path, { token: events.key })).status).toBe(200);
      expectError(await api.get(path), 401, 'UNAUTHORIZED');
    }
    // events:read is only that: webhooks still need a credential without a scope list.
    expectError(await api.get(W, { token: events.key }), 403, 'FORBIDDEN');
    expectError(await api.get(`${E}?deliveryFailed=true&webhookId=whk_none`, { token: elsewhere.key }), 403, 'FORBIDDEN');
  });

  it.each([
    ['after that is not a date', 'after=yesterday', 'after'],
    ['after on a day that does not exist', 'after=2025-02-30T00:00:00Z', 'after'],
    ['before without a time zone', 'before=2025-01-01T00:00:00', 'before'],
    ['before as epoch milliseconds', 'before=1735689600000', 'before'],
    ['before not later than after', 'after=2025-01-02T00:00:00Z&before=2025-01-01T00:00:00Z', 'before'],
    ['an empty window', 'after=2025-01-01T00:00:00Z&before=2025-01-01T00:00:00Z', 'before'],
    ['an unknown type', 'type=project.exploded', 'type'],
    ['webhook.test, which is not stored', 'type=webhook.test', 'type'],
    ['deliveryFailed without webhookId', 'deliveryFailed=true', 'webhookId'],
    ['webhookId without deliveryFailed', 'webhookId=whk_0000000000000000000000', 'webhookId'],
    ['deliveryFailed that is not a boolean', 'deliveryFailed=maybe', 'deliveryFailed'],
    ['a bad cursor', 'cursor=garbage', 'cursor'],
    ['limit 0', 'limit=0', 'limit'],
    ['an unknown parameter', 'since=2025-01-01T00:00:00Z', 'since'],
  ])('refuses %s with a 400 naming the field', async (_label, query, field) => {
    const t = await signUp(api, 'Bad input');
    const err = expectError(await api.get(`${E}?${query}`, { token: t.accessToken }), 400, 'VALIDATION_ERROR');
    expect(err.details.fields.map((f: { field: string }) => f.field)).toContain(field);
  });
});

describe('GET /events?deliveryFailed=true&webhookId=', () => {
  it('lists what an endpoint missed: of its types, created after it, failed or never tried while it was disabled', async () => {
    const t = await signUp(api, 'Missed');
    const earlier = await project(t, 'before the endpoint');
    const hook = await register(t, '/missed', ['project.created']);
    const delivered = await project(t, 'delivered');
    await eventually(async () => receiver.at('/missed').some((r) => r.json.data.id === delivered.id), 10_000);
    down.add('/missed');
    const failed = await project(t, 'failed');
    await eventually(async () => (await api.get(`${W}/${hook.id}`, { token: t.accessToken })).body.data.active === false, 15_000);
    const neverTried = await project(t, 'while disabled');
    await api.patch(`/api/v1/projects/${neverTried.id}`, { name: 'renamed' }, { token: t.accessToken }); // not its type
    await eventually(async () => (await walk(t.accessToken, 'type=project.updated')).length === 1, 10_000);

    const q = `deliveryFailed=true&webhookId=${hook.id}`;
    const missed = await walk(t.accessToken, q);
    expect(missed.map((e) => [e.type, e.data.id])).toEqual([
      ['project.created', neverTried.id],
      ['project.created', failed.id],
    ]);
    expect((await walk(t.accessToken, q, 1)).map((e) => e.id)).toEqual(missed.map((e) => e.id));
    expect(await walk(t.accessToken, `${q}&type=project.updated`)).toEqual([]);
    const all = await walk(t.accessToken);
    expect(all.some((e) => e.data.id === earlier.id)).toBe(true); // in the log, but from before the endpoint
    // Another tenant's endpoint is not found, as everywhere.
    const other = await signUp(api, 'Other');
    const err = expectError(await api.get(`${E}?${q}`, { token: other.accessToken }), 404, 'RESOURCE_NOT_FOUND');
    expect(err.details).toEqual({ resource: 'webhook', id: hook.id });
    down.delete('/missed');
  });
});

describe('GET /events/stream', () => {
  const S = `${E}/stream`;
  /** The tenant's sign-up events are in the log: a stream opened now starts after them. */
  async function settled(name: string) {
    const t = await signUp(api, name);
    await eventually(async () => (await walk(t.accessToken)).length === 2, 10_000);
    return t;
  }
  const stream = (token: string, options: SseOptions = {}) => readSse(`${stack.url}${S}`, { token, ...options });
  const createdFor = (id: string) => (events: SseEvent[]) => events.some((e) => e.event === 'project.created' && e.data.data.id === id);

  it("sends each event created after connecting, as GET /events shows it, and never another tenant's", async () => {
    const [t, other] = await Promise.all([settled('Live'), settled('Live other')]);
    let last = '';
    const live = await stream(t.accessToken, {
      onOpen: async () => {
        await project(other, 'theirs');
        await project(t, 'first');
        last = (await project(t, 'second')).id;
      },
      stopAfter: (events) => last !== '' && createdFor(last)(events),
    });
    expect(live.status).toBe(200);
    expect(live.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(live.events.map((e) => [e.event, e.data.data.name])).toEqual([
      ['project.created', 'first'],
      ['project.created', 'second'],
    ]);
    for (const e of live.events) {
      expect(e.id).toBe(e.data.id);
      expect(e.data.tenantId).toBe(t.tenantId);
      expect(e.data).toEqual((await api.get(`${E}/${e.id}`, { token: t.accessToken })).body.data);
    }
  });

  it("resumes after Last-Event-ID with every event since, none twice; an unknown or another tenant's id is 404", async () => {
    const [t, other] = await Promise.all([settled('Resume'), settled('Resume other')]);
    const names = ['p1', 'p2', 'p3', 'p4'];
    const ids: string[] = [];
    const first = await stream(t.accessToken, {
      onOpen: async () => {
        for (const name of names.slice(0, 2)) ids.push((await project(t, name)).id);
      },
      stopAfter: (events) => ids.length === 2 && createdFor(ids[0])(events),
    });
    const seen = first.events[0];
    expect(seen.data.data.name).toBe('p1');
    // Disconnected: more happens meanwhile.
    for (const name of names.slice(2)) ids.push((await project(t, name)).id);
    const resumed = await stream(t.accessToken, { headers: { 'last-event-id': seen.id! }, stopAfter: createdFor(ids[3]) });
    expect(resumed.status).toBe(200);
    expect(resumed.events.map((e) => e.data.data.name)).toEqual(['p2', 'p3', 'p4']);
    expect(new Set(resumed.events.map((e) => e.id)).size).toBe(3);
    // The query parameter is the header's stand-in (for clients that cannot set headers).
    const byQuery = await readSse(`${stack.url}${S}?lastEventId=${resumed.events[1].id}`, {
      token: t.accessToken,
      stopAfter: createdFor(ids[3]),
    });
    expect(byQuery.events.map((e) => e.data.data.name)).toEqual(['p4']);

    const theirs = (await walk(other.accessToken))[0];
    for (const id of ['evt_unknown', theirs.id]) {
      const res = await stream(t.accessToken, { headers: { 'last-event-id': id } });
      expect({ status: res.status, code: res.body.error.code }).toEqual({ status: 404, code: 'RESOURCE_NOT_FOUND' });
      expect(JSON.stringify(res.body)).not.toContain(other.tenantId);
    }
  });

  it('needs events:read, counts against SSE_STREAMS_PER_TENANT and sends heartbeats', async () => {
    const t = await settled('Stream scopes');
    const elsewhere = await createKey(api, t.accessToken, { scopes: ['projects:read'] });
    const reader = await createKey(api, t.accessToken, { scopes: ['events:read'] });
    const refused = await stream(elsewhere.key);
    expect({ status: refused.status, code: refused.body.error.code }).toEqual({ status: 403, code: 'FORBIDDEN' });
    expect((await stream('')).status).toBe(401);

    // Three held open (the cap here), a fourth refused; each hears a heartbeat comment.
    const release: Array<() => void> = [];
    const held = [0, 1, 2].map(() => {
      let opened!: () => void;
      const isOpen = new Promise<void>((resolve) => (opened = resolve));
      let stop = false;
      release.push(() => (stop = true));
      const done = stream(reader.key, {
        onOpen: async () => opened(),
        stopAfter: (_events, result) => stop && result.comments > 0,
      });
      return { isOpen, done };
    });
    await Promise.all(held.map((h) => h.isOpen));
    const fourth = await stream(reader.key);
    expect(fourth.status).toBe(429);
    expect(fourth.body.error).toMatchObject({ code: 'RATE_LIMIT_EXCEEDED', details: { reason: 'too_many_streams', limit: 3 } });
    for (const r of release) r();
    for (const r of await Promise.all(held.map((h) => h.done))) expect(r.comments).toBeGreaterThan(0);
    // Their places are free again once they closed.
    await eventually(async () => (await stream(reader.key, { stopAfter: () => true })).status === 200);
  });
});

// Last: moves the webhooks service's clock.
describe('retention', () => {
  it('an event older than EVENTS_RETENTION_DAYS (30) is gone from the list and by id', async () => {
    const t = await signUp(api, 'Old');
    let list: Ev[] = [];
    await eventually(async () => (list = await walk(t.accessToken)).length === 2, 10_000);
    clockShift = 29 * DAY;
    expect(await walk(t.accessToken)).toHaveLength(2);
    clockShift = 30 * DAY + 60_000;
    expect(await walk(t.accessToken)).toEqual([]);
    for (const e of list) expectError(await api.get(`${E}/${e.id}`, { token: t.accessToken }), 404, 'RESOURCE_NOT_FOUND');
    clockShift = 0;
    expect(await walk(t.accessToken)).toHaveLength(2);
  });
});
