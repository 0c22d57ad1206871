/**
 * The Kafka bus against a real broker under faults: a broker outage (a broker of this test's own, stopped and
 * started), a consumer killed in the middle of a handler, a rebalance, poison messages and their replay through
 * `npm run bus:dead-letters` run as a process. The store-outage property is in the contract (bus.contract.ts), for
 * both buses.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { testKafkaBrokers } from '../../../../test/kafka/env';
import { startKafkaBroker, type KafkaBroker } from '../../../../test/kafka/broker';
import { openSqliteStore } from '../storage/sqlite';
import type { Store } from '../storage/types';
import { message, unique, waitFor } from './bus.contract';
import { openKafkaBus, type KafkaBusOptions } from './kafka';
import { PoisonMessageError } from './poison';
import type { EventBus, ReceivedMessage } from './types';

jest.setTimeout(90_000);

const brokers = testKafkaBrokers();
const repoRoot = resolve(__dirname, '../../../..');
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

function openBus(options: Partial<KafkaBusOptions> = {}): EventBus {
  const bus = openKafkaBus({ brokers, clientId: 'kafka-faults-test', ...options });
  cleanups.push(() => bus.close());
  return bus;
}

/** A TypeScript entry run as its own process (through tsx); stdout kept as lines. */
function run(entry: string, args: string[], env: NodeJS.ProcessEnv = {}) {
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', entry, ...args], {
    cwd: repoRoot,
    env: { ...process.env, ...env },
    stdio: ['pipe', 'pipe', 'pipe'], // stdin closes when this process dies, and fixtures that run until killed exit
  });
  const lines: string[] = [];
  let partial = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    const parts = (partial + chunk.toString()).split('\n');
    partial = parts.pop()!;
    lines.push(...parts);
  });
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exit = new Promise<number | null>((done) => child.on('exit', (code) => done(code)));
  cleanups.push(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return { child, lines, exit, stderr: () => stderr };
}

async function timed<T>(work: Promise<T>): Promise<{ ms: number; result: PromiseSettledResult<T> }> {
  const started = Date.now();
  const [result] = await Promise.allSettled([work]);
  return { ms: Date.now() - started, result };
}

describe('a broker outage (a broker of its own, stopped and started)', () => {
  let broker: KafkaBroker;
  beforeAll(async () => {
    broker = await startKafkaBroker();
  });
  afterAll(() => broker.destroy());
  // A short session: after the broker's restart the group waits for the old membership to expire before it resumes.
  const open = (clientId: string, options: Partial<KafkaBusOptions> = {}) => {
    const bus = openKafkaBus({ brokers: [broker.brokers], clientId, sessionTimeoutMs: 6000, ...options });
    cleanups.push(() => bus.close());
    return bus;
  };

  // One outage for both properties (a broker's stop and start is most of this suite's time).
  test('while the broker is down a publish fails within its bound and close() is bounded; the same bus carries on when it returns, and nothing of the closed one goes on', async () => {
    const bound = 2000;
    const bus = open('kafka-faults-outage', { publishTimeoutMs: bound });
    const cold = open('kafka-faults-cold', { publishTimeoutMs: bound });
    const reportedAt: number[] = [];
    const closing = open('kafka-faults-close', { onError: () => reportedAt.push(Date.now()) });
    const [topic, closingTopic] = [unique('outage'), unique('closing')];
    const got: string[] = [];
    const closingGot: string[] = [];
    await bus.subscribe({ group: unique('g'), topics: [topic], handler: async (m) => void got.push(m.id) });
    await closing.subscribe({ group: unique('g'), topics: [closingTopic], handler: async (m) => void closingGot.push(m.id) });
    await bus.publish([message(topic, 'k', 0), message(closingTopic, 'k', 0)]);
    await waitFor('both consumers running', () => got.includes(`${topic}-0`) && closingGot.length > 0, 30_000);

    await broker.stop();
    const closed = timed(closing.close());
    // A topic the producer knows; a bus that never reached the broker, to a topic it must create on the way. (Not
    // `bus` to a new topic: kafkajs would then ask for that topic's metadata on every send until it exists.)
    for (const [publisher, t] of [
      [bus, topic],
      [cold, unique('unknown')],
    ] as const) {
      const { ms, result } = await timed(publisher.publish([message(t, 'k', 1, unique('during'))]));
      expect(result.status).toBe('rejected');
      expect(ms).toBeLessThan(bound + 2000); // a loaded machine's margin
    }
    const { ms: closeMs, result: closeResult } = await closed;
    expect(closeResult.status).toBe('fulfilled');
    expect(closeMs).toBeLessThan(15_000); // the consumer gets 5 s to leave its group, the clients 5 s more
    const closedAt = Date.now();

    // The outbox keeps publishing through the same bus: it succeeds once the broker is back, and the consumer resumes.
    await broker.start();
    const after = message(topic, 'k', 2);
    for (let i = 0; ; i++) {
      const { result } = await timed(bus.publish([after]));
      if (result.status === 'fulfilled') break;
      if (i === 10) throw result.reason;
    }
    await waitFor('the consumer to resume', () => got.includes(after.id), 40_000);
    // A consumer of the closed bus left restarting against the dead broker would keep failing, and rejoin its group
    // once it is back: 10 s of the outage's end, and nothing.
    await new Promise((r) => setTimeout(r, Math.max(0, closedAt + 10_000 - Date.now())));
    expect(reportedAt.filter((t) => t > closedAt)).toEqual([]);
  });
});

test('offsets are committed only after handling: a consumer killed in the middle of a handler leaves that message to the next one', async () => {
  const bus = openBus();
  const topic = unique('killed');
  const group = unique('g');
  const first = [0, 1, 2].map((n) => message(topic, 'k', n));
  const [hang, behind] = [message(topic, 'k', 3), message(topic, 'k', 4)];
  await bus.publish(first);
  // Its own process, so that it can die without leaving the group: its session (6 s) has to expire first.
  const consumer = run(join(__dirname, 'fixtures', 'kafka-consume.ts'), [brokers.join(','), group, topic, hang.id, '6000']);
  await waitFor('the first messages handled', () => first.every((m) => consumer.lines.includes(`handled ${m.id}`)), 40_000);
  await bus.publish([hang, behind]);
  await waitFor('the handler in flight', () => consumer.lines.includes(`handling ${hang.id}`), 30_000);
  consumer.child.kill('SIGKILL');
  await consumer.exit;

  const got: string[] = [];
  await bus.subscribe({ group, topics: [topic], handler: async (m) => void got.push(m.id) });
  await waitFor('the messages after the kill', () => got.includes(behind.id), 40_000);
  expect(consumer.lines).not.toContain(`handled ${hang.id}`);
  expect(got).toEqual([hang.id, behind.id]); // the handled batch was committed; the one in flight was not
});

test('a rebalance between two consumers of a group loses nothing, and the duplicates it may bring are dropped by id', async () => {
  // Kafka has no dedupe of its own: the handlers' idempotence by event id drops a redelivery (billing's ledger key,
  // webhooks' delivery per event, regions' applied events). This handler does the same in a real store.
  const dir = mkdtempSync(join(tmpdir(), 'kafka-rebalance-'));
  const store: Store = openSqliteStore({ path: join(dir, 'store.db') });
  cleanups.push(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const appliedEvents = { name: 'applied_events' } as const;
  await store.ensure<{ id: string; key: string; createdAt: string }>(appliedEvents);

  const topic = unique('rebalance');
  const group = unique('g');
  const deliveries: Array<{ by: string; id: string }> = [];
  const firstApplied: ReceivedMessage[] = [];
  const handler = (by: string) => async (m: ReceivedMessage) => {
    deliveries.push({ by, id: m.id });
    const applied = await store.transaction(async (tx) => {
      const col = tx.collection<{ id: string; key: string; createdAt: string }>(appliedEvents);
      if (await col.get(m.id)) return false;
      await col.insert({ id: m.id, key: m.key, createdAt: new Date().toISOString() });
      return true;
    });
    if (applied) firstApplied.push(m);
    await new Promise((r) => setTimeout(r, 2)); // handlers in flight when the group rebalances
  };
  const [a, b] = [openBus(), openBus()];
  const keys = Array.from({ length: 12 }, (_, i) => `tenant-${i}`);
  const sent: ReturnType<typeof message>[] = [];
  const subA = await a.subscribe({ group, topics: [topic], handler: handler('a') });
  for (let round = 0; round < 30; round++) {
    const batch = keys.map((k, i) => message(topic, k, round * keys.length + i));
    sent.push(...batch);
    await a.publish(batch);
    if (round === 8) await b.subscribe({ group, topics: [topic], handler: handler('b') }); // a rebalance: b joins
    if (round === 20) await subA.stop(); // another: a leaves, b takes everything
    await new Promise((r) => setTimeout(r, 50));
  }
  const sentinels = keys.map((k, i) => message(topic, k, 10_000 + i));
  await b.publish(sentinels);
  // Each sentinel is behind its key's messages: once all are applied, anything lost would be missing for good.
  await waitFor('every sentinel', () => sentinels.every((s) => firstApplied.some((m) => m.id === s.id)), 60_000);

  const all = [...sent, ...sentinels];
  expect(new Set(firstApplied.map((m) => m.id))).toEqual(new Set(all.map((m) => m.id)));
  expect(await store.collection(appliedEvents).count({})).toBe(all.length);
  for (const k of keys)
    expect(firstApplied.filter((m) => m.key === k).map((m) => m.id)).toEqual(all.filter((m) => m.key === k).map((m) => m.id));
  expect(deliveries.length).toBeGreaterThanOrEqual(all.length); // duplicates allowed, applied once
  expect(new Set(deliveries.map((d) => d.by))).toEqual(new Set(['a', 'b'])); // both consumers had partitions
  expect(deliveries.slice(-sentinels.length).every((d) => d.by === 'b')).toBe(true);
});

test('a poison message goes to the dead letters, and `npm run bus:dead-letters` lists it and replays it to its group only', async () => {
  const bus = openBus({ maxAttempts: 2 });
  const topic = unique('poison');
  const [g1, g2] = [unique('g1'), unique('g2')];
  const [bad, good] = [message(topic, 'k', 0), message(topic, 'k', 1)];
  let healed = false;
  const [h1, h2]: string[][] = [[], []];
  await bus.subscribe({
    group: g1,
    topics: [topic],
    handler: async (m) => {
      if (m.id === bad.id && !healed) throw new PoisonMessageError('not a domain event');
      h1.push(m.id);
    },
  });
  await bus.subscribe({ group: g2, topics: [topic], handler: async (m) => void h2.push(m.id) });
  await bus.publish([bad, good]);
  await waitFor('both groups past the poison message', () => h1.includes(good.id) && h2.includes(good.id), 40_000);

  const env = { KAFKA_BROKERS: brokers.join(',') };
  const script = join(repoRoot, 'scripts', 'dead-letters.ts');
  const list = run(script, ['list', g1], env);
  expect(await list.exit).toBe(0);
  const line = list.lines.find((l) => l.includes(bad.id));
  expect(line).toBeDefined();
  expect(line).toContain(`${g1}  ${topic}  `);
  expect(line).toContain('after 2 attempts');
  expect(line).toContain('not a domain event');
  expect(list.lines.filter((l) => l.includes(topic))).toHaveLength(1); // g2 handled it: not its dead letter
  const ref = line!.split(/\s+/)[2];

  healed = true; // the cause is fixed: the operator replays it
  const replay = run(script, ['replay', g1, topic, ref], env);
  expect(await replay.exit).toBe(0);
  expect(replay.lines).toContain(`Replayed ${topic} ${ref} to ${g1}.`);
  await waitFor('the replayed message', () => h1.includes(bad.id), 40_000);

  // g2 skips the replay: a sentinel behind it on the same key reaches g2 with nothing before it.
  const sentinel = message(topic, 'k', 2);
  await bus.publish([sentinel]);
  await waitFor('the sentinel', () => h1.includes(sentinel.id) && h2.includes(sentinel.id), 40_000);
  expect(h1).toEqual([good.id, bad.id, sentinel.id]);
  expect(h2).toEqual([bad.id, good.id, sentinel.id]);

  const again = run(script, ['list', g1], env);
  expect(await again.exit).toBe(0);
  expect(again.lines.filter((l) => l.includes(topic))).toEqual([]); // replayed: listed no more
});
