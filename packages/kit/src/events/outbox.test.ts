import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openSqliteStore } from '../storage/sqlite';
import { sendSignal, watchSignal } from '../storage/watch-writes';
import type { CollectionDef, Store } from '../storage/types';
import { message, unique, waitFor } from './bus.contract';
import { openEmbeddedBus, type EmbeddedBus } from './embedded';
import { OutboxRelay, addToOutbox, outboxCollection, outboxKeys } from './outbox';
import type { BusMessage, EventBus, ReceivedMessage } from './types';

interface Project {
  id: string;
  tenantId: string;
  name: string;
  createdAt: string;
}
const projects: CollectionDef<Project> = { name: 'projects', indexes: [{ fields: ['tenantId'] }] };

const dir = mkdtempSync(join(tmpdir(), 'outbox-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let store: Store;
let storePath: string;
let bus: EmbeddedBus;
beforeEach(async () => {
  const name = unique('t');
  storePath = join(dir, `${name}-store.db`);
  store = openSqliteStore({ path: storePath });
  await store.ensure(projects);
  await store.ensure(outboxCollection);
  bus = openEmbeddedBus({ path: join(dir, `${name}-bus.db`) });
});
afterEach(async () => {
  await bus.close();
  await store.close();
});

async function consume(topic: string): Promise<ReceivedMessage[]> {
  const got: ReceivedMessage[] = [];
  await bus.subscribe({ group: 'consumer', topics: [topic], handler: async (m) => void got.push(m) });
  return got;
}

/** Creates a project and its event in one store transaction, as a service would. */
async function createProject(id: string, event: BusMessage, fail = false): Promise<void> {
  await store.transaction(async (tx) => {
    await tx.collection(projects).insert({ id, tenantId: event.key, name: id, createdAt: new Date().toISOString() });
    await addToOutbox(tx, event);
    if (fail) throw new Error('rolled back');
  });
}

const pending = () => store.collection(outboxCollection).count({});

test('an event added in a transaction that rolls back is never published', async () => {
  const topic = unique('project.created');
  const got = await consume(topic);
  const relay = new OutboxRelay(store, bus);

  await expect(createProject('p1', message(topic, 'tenant-1', 1), true)).rejects.toThrow('rolled back');
  await createProject('p2', message(topic, 'tenant-1', 2));
  await relay.flush();

  // Same key, so in order: had the rolled-back event gone out, it would arrive before the committed one.
  await waitFor('the committed event', () => got.length >= 1);
  await relay.stop();
  expect(got.map((m) => m.id)).toEqual([`${topic}-2`]);
  expect(await store.collection(projects).count({})).toBe(1);
  expect(await pending()).toBe(0);
});

test('committed events are published in order, intact, and removed from the outbox', async () => {
  const topic = unique('project.created');
  const got = await consume(topic);
  const relay = new OutboxRelay(store, bus, { batchSize: 4 });
  relay.start();

  const sent: BusMessage[] = [];
  for (let i = 0; i < 15; i++) {
    const event = {
      ...message(topic, `tenant-${i % 2}`, i),
      value: new Uint8Array([0, 255, i, 10, 13]),
      headers: { traceparent: `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`, 'event-type': 'project.created' },
    };
    sent.push(event);
    await createProject(`p${i}`, event);
    if (i % 3 === 0) relay.notify(); // some right after commit, the rest by the relay's own polling
  }
  await waitFor('every event', () => got.length >= sent.length);
  await relay.stop();

  expect(got.map((m) => m.id)).toEqual(sent.map((m) => m.id));
  got.forEach((m, i) => {
    expect(Buffer.from(m.value).equals(Buffer.from(sent[i].value))).toBe(true);
    expect(m.headers).toEqual(sent[i].headers);
    expect(m.key).toBe(sent[i].key);
  });
  expect(await pending()).toBe(0);
});

test('a relay that crashes between publish and delete republishes, and each id is consumed once', async () => {
  const topic = unique('project.created');
  const got = await consume(topic);
  // Publishes for real, then fails as if the process died before deleting the records.
  const crashing: EventBus = {
    kind: bus.kind,
    publish: async (messages) => {
      await bus.publish(messages);
      throw new Error('crashed after publish');
    },
    subscribe: (o) => bus.subscribe(o),
    ping: () => bus.ping(),
    stalled: () => bus.stalled(),
    close: async () => {},
  };
  const sent = [0, 1, 2, 3, 4].map((i) => message(topic, 'tenant-1', i));
  for (const [i, event] of sent.entries()) await createProject(`p${i}`, event);

  await expect(new OutboxRelay(store, crashing).flush()).rejects.toThrow('crashed after publish');
  expect(await pending()).toBe(sent.length); // nothing deleted: they go out again

  const restarted = new OutboxRelay(store, bus);
  await restarted.flush();
  expect(await pending()).toBe(0);

  // A sentinel on the same key: anything delivered twice would have arrived before it.
  const sentinel = message(topic, 'tenant-1', 99);
  await bus.publish([sentinel]);
  await waitFor('the sentinel', () => got.some((m) => m.id === sentinel.id));
  await restarted.stop();
  expect(got.map((m) => m.id)).toEqual([...sent, sentinel].map((m) => m.id));
});

test('only one relay run at a time; notify during a run is not lost', async () => {
  const topic = unique('project.created');
  const got = await consume(topic);
  let concurrent = 0;
  let maxConcurrent = 0;
  const slow: EventBus = {
    kind: bus.kind,
    publish: async (messages) => {
      maxConcurrent = Math.max(maxConcurrent, ++concurrent);
      await new Promise((r) => setTimeout(r, 20));
      await bus.publish(messages);
      concurrent--;
    },
    subscribe: (o) => bus.subscribe(o),
    ping: () => bus.ping(),
    stalled: () => bus.stalled(),
    close: async () => {},
  };
  // A long interval: only notify() and flush() drive it here.
  const relay = new OutboxRelay(store, slow, { intervalMs: 60_000, batchSize: 2 });
  relay.start();
  for (let i = 0; i < 10; i++) {
    await createProject(`p${i}`, message(topic, 'tenant-1', i));
    relay.notify();
    relay.notify();
  }
  await waitFor('every event', () => got.length >= 10);
  await relay.stop();
  expect(maxConcurrent).toBe(1);
  expect(got.map((m) => m.id)).toEqual(Array.from({ length: 10 }, (_, i) => `${topic}-${i}`));
});

test('the commits of one turn of the event loop go out in one batch: one read, one publish, one delete', async () => {
  const topic = unique('project.created');
  const got = await consume(topic);
  const batches: number[] = [];
  const counting: EventBus = {
    kind: bus.kind,
    publish: async (messages) => {
      batches.push(messages.length);
      await bus.publish(messages);
    },
    subscribe: (o) => bus.subscribe(o),
    ping: () => bus.ping(),
    stalled: () => bus.stalled(),
    close: async () => {},
  };
  const relay = new OutboxRelay(store, counting, { intervalMs: 60_000 });
  relay.start();
  await waitFor('the start-up run', () => batches.length === 0 && relay.leading);
  // Five requests handled in the same turn of the event loop, each in its own callback (as each request's I/O is),
  // each committing and then telling the relay, as the services' handlers do. Immediates queued together run in one
  // turn; timers did only when the five fell in the same millisecond.
  await Promise.all(
    Array.from(
      { length: 5 },
      (_, i) =>
        new Promise<void>((done, fail) =>
          setImmediate(() => {
            createProject(`p${i}`, message(topic, 'tenant-1', i)).then(() => {
              relay.notify();
              done();
            }, fail);
          }),
        ),
    ),
  );
  await waitFor('every event', () => got.length >= 5);
  await relay.stop();
  expect(batches).toEqual([5]);
  expect(await pending()).toBe(0);
});

test("a key's seq follows commit order even when this machine's clock is behind the key's last event", async () => {
  const topic = unique('project.created');
  // Another replica with a clock an hour ahead committed the key's last event.
  const ahead = (Date.now() + 3600_000) * 1000;
  await store.transaction((tx) => tx.collection(outboxKeys).insert({ id: 'tenant-skew', lastSeq: ahead }));
  await createProject('p1', message(topic, 'tenant-skew', 1));
  await createProject('p2', message(topic, 'tenant-skew', 2));
  const { items } = await store.collection(outboxCollection).find({}, { order: 'asc', limit: 10 });
  expect(items.map((r) => [r.id, r.seq])).toEqual([
    [`${topic}-1`, ahead + 1],
    [`${topic}-2`, ahead + 2],
  ]);
});

describe('several relays on one store (replicas)', () => {
  test('one publishes; a stopped holder hands over at once; a silent one is taken over after leaseMs on the observer clock', async () => {
    const topic = unique('project.created');
    const got = await consume(topic);
    let clockA = 0;
    let clockB = 0;
    const a = new OutboxRelay(store, bus, { intervalMs: 60_000, leaseMs: 3000, now: () => clockA });
    const b = new OutboxRelay(store, bus, { intervalMs: 60_000, leaseMs: 3000, now: () => clockB });
    a.start();
    b.start();
    await createProject('p1', message(topic, 'tenant-1', 1));
    await a.flush();
    await b.flush();
    await waitFor('the first event', () => got.length >= 1);
    expect([a.leading, b.leading].filter(Boolean)).toHaveLength(1);
    const [holder, other] = a.leading ? [a, b] : [b, a];
    const advance = (ms: number) => (other === a ? (clockA += ms) : (clockB += ms));

    // The holder goes silent (no beat); the other sees the same beat for leaseMs on its own clock, then takes over.
    await createProject('p2', message(topic, 'tenant-1', 2));
    await other.flush();
    expect(other.leading).toBe(false);
    advance(3000);
    await other.flush();
    expect(other.leading).toBe(true);
    await waitFor('the second event', () => got.length >= 2);

    // The old holder still believes it leads until its next beat finds the lease gone: it relays nothing more.
    await createProject('p3', message(topic, 'tenant-1', 3));
    if (other === a) clockB += 10_000;
    else clockA += 10_000; // make the old holder beat (and find the lease gone)
    await holder.flush();
    expect(holder.leading).toBe(false);
    await other.flush();
    await waitFor('the third event', () => got.some((m) => m.id === `${topic}-3`));
    expect(await pending()).toBe(0);

    // A holder that stops hands the lease back: the other relays at once.
    await other.stop();
    await createProject('p4', message(topic, 'tenant-1', 4));
    await holder.flush();
    expect(holder.leading).toBe(true);
    await waitFor('the fourth event', () => got.some((m) => m.id === `${topic}-4`));
    await holder.stop();
    expect([...new Set(got.map((m) => m.id))]).toEqual([1, 2, 3, 4].map((n) => `${topic}-${n}`));
  });

  test("a replica's record wakes the holder through the outbox signal, not its other writes; a lost signal is found by the safety poll", async () => {
    const topic = unique('project.created');
    const got = await consume(topic);
    const signal = join(dir, `${unique('store')}-signals/outbox`);
    // Two replicas on one store file, as the service runtime wires them on SQLite.
    const replica = openSqliteStore({ path: storePath });
    const wakes = { a: 0, b: 0 };
    const relay = (s: Store, name: 'a' | 'b', intervalMs: number) =>
      new OutboxRelay(s, bus, {
        intervalMs,
        wake: (hint) => watchSignal(signal, () => (wakes[name]++, hint())),
        announce: () => sendSignal(signal),
      });
    const a = relay(store, 'a', 60_000);
    const b = relay(replica, 'b', 60_000);
    try {
      a.start();
      await a.flush();
      expect(a.leading).toBe(true);
      b.start();
      await b.flush();
      expect(b.leading).toBe(false);

      // Writes that add nothing to the outbox wake no relay.
      for (let i = 0; i < 5; i++)
        await replica.collection(projects).insert({ id: `quiet-${i}`, tenantId: 't', name: 'q', createdAt: new Date().toISOString() });
      await new Promise((r) => setTimeout(r, 200));
      expect(wakes).toEqual({ a: 0, b: 0 });

      // The replica that does not hold the lease adds an event and notifies: the holder relays it long before its
      // 60 s safety poll.
      await replica.transaction((tx) => addToOutbox(tx, message(topic, 'tenant-1', 1)));
      b.notify();
      await waitFor('the replica event, relayed by the holder', () => got.length >= 1);
      expect(wakes.a).toBeGreaterThanOrEqual(1);
      expect(b.leading).toBe(false);
      // And then quiet: a relay woken announces nothing (two replicas without the lease must not wake each other).
      await new Promise((r) => setTimeout(r, 100));
      const settled = { ...wakes };
      await new Promise((r) => setTimeout(r, 300));
      expect(wakes).toEqual(settled);
    } finally {
      await b.stop();
      await a.stop();
      await replica.close();
    }

    // A record whose signal was lost (a replica that crashed between its commit and its notify): the holder's safety
    // poll relays it.
    const polling = relay(store, 'a', 300);
    const replica2 = openSqliteStore({ path: storePath });
    try {
      polling.start();
      await polling.flush();
      await replica2.transaction((tx) => addToOutbox(tx, message(topic, 'tenant-1', 2)));
      await waitFor('the event with no signal', () => got.some((m) => m.id === `${topic}-2`));
    } finally {
      await polling.stop();
      await replica2.close();
    }
    expect(got.map((m) => m.id)).toEqual([`${topic}-1`, `${topic}-2`]);
  });
});
