/**
 * The event port's contract, run against every adapter (embedded always, Kafka when KAFKA_BROKERS is set).
 * `open` must return a bus on the same log each time (the restart test reopens it). Every test uses fresh topic
 * and group names, so a shared broker or file is fine. Assertions are on outcomes; waits are generous.
 */
import { randomUUID } from 'node:crypto';
import { PoisonMessageError } from './poison';
import type { BusErrorHandler, BusMessage, EventBus, ReceivedMessage, StalledConsumer, Subscription } from './types';

export async function waitFor(what: string, cond: () => boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export function unique(prefix: string): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

export function message(topic: string, key: string, n: number, id = `${topic}-${n}`): BusMessage {
  return { id, topic, key, value: Buffer.from(JSON.stringify({ n })), headers: { 'event-type': 'test.counted' } };
}

const ids = (list: Array<{ id: string }>) => list.map((m) => m.id);

export interface ContractBusOptions {
  maxAttempts?: number;
  retryMaxMs?: number;
  onError?: BusErrorHandler;
}

/**
 * `wire`: only the tests whose outcome the transport decides (delivery, order, groups, committed positions, bytes and
 * headers), for a second run of one adapter over another transport (Kafka over SASL_SSL). The consumer's own logic
 * (retries, dead letters, batches, stop) is the same code whatever the connection, and runs once per adapter.
 */
export type ContractScope = 'all' | 'wire';

export function busContract(name: string, open: (options?: ContractBusOptions) => Promise<EventBus>, scope: ContractScope = 'all'): void {
  /** A test of the consumer's own logic: not part of the `wire` scope. */
  const logicTest = (title: string, fn: () => Promise<void>, timeoutMs?: number) => {
    if (scope === 'all') test(title, fn, timeoutMs);
  };
  describe(`event bus contract: ${name}`, () => {
    const opened: EventBus[] = [];
    const openBus = async (options?: ContractBusOptions) => {
      const bus = await open(options);
      opened.push(bus);
      return bus;
    };
    afterEach(async () => {
      await Promise.all(opened.splice(0).map((b) => b.close()));
    });

    async function collect(bus: EventBus, group: string, topics: string[]) {
      const got: ReceivedMessage[] = [];
      const sub = await bus.subscribe({ group, topics, handler: async (m) => void got.push(m) });
      return { got, sub };
    }

    test('a subscriber receives everything published, in order per key', async () => {
      const bus = await openBus();
      const topic = unique('orders');
      const sent = Array.from({ length: 30 }, (_, i) => message(topic, `tenant-${i % 3}`, i));
      await bus.publish(sent.slice(0, 10));
      const { got, sub } = await collect(bus, unique('g'), [topic]);
      await bus.publish(sent.slice(10)); // some before, some after subscribing
      await waitFor('30 messages', () => got.length >= 30);
      await sub.stop();

      expect(ids(got).sort()).toEqual(ids(sent).sort());
      for (const key of ['tenant-0', 'tenant-1', 'tenant-2']) {
        expect(ids(got.filter((m) => m.key === key))).toEqual(ids(sent.filter((m) => m.key === key)));
      }
      expect(got.every((m) => m.topic === topic && typeof m.offset === 'string' && m.timestamp > 0)).toBe(true);
    });

    test('two groups each receive every message', async () => {
      const bus = await openBus();
      const topic = unique('fanout');
      const sent = Array.from({ length: 12 }, (_, i) => message(topic, 'k', i));
      const a = await collect(bus, unique('ga'), [topic]);
      const b = await collect(bus, unique('gb'), [topic]);
      await bus.publish(sent);
      await waitFor('both groups', () => a.got.length >= 12 && b.got.length >= 12);
      await Promise.all([a.sub.stop(), b.sub.stop()]);
      expect(ids(a.got)).toEqual(ids(sent));
      expect(ids(b.got)).toEqual(ids(sent));
    });

    test("a group's position survives close and reopen", async () => {
      const topic = unique('restart');
      const group = unique('g');
      const first = [0, 1, 2, 3, 4].map((n) => message(topic, 'k', n));
      const later = [5, 6, 7].map((n) => message(topic, 'k', n));
      const sentinel = message(topic, 'k', 99);

      const bus1 = await openBus();
      await bus1.publish(first);
      const run1 = await collect(bus1, group, [topic]);
      await waitFor('first run', () => run1.got.length >= first.length);
      await run1.sub.stop();
      await bus1.close();

      const bus2 = await openBus();
      await bus2.publish(later); // published while the group was not consuming
      const run2 = await collect(bus2, group, [topic]);
      await waitFor('later messages', () => run2.got.some((m) => m.id === later[2].id));
      // Same key, so in order: once the sentinel is in, any redelivery of the first run would have shown up.
      await bus2.publish([sentinel]);
      await waitFor('sentinel', () => run2.got.some((m) => m.id === sentinel.id));
      await run2.sub.stop();

      expect(ids(run1.got)).toEqual(ids(first));
      expect(ids(run2.got)).toEqual(ids([...later, sentinel]));
    });

    test('a backlog is committed as it is handled: a restarted group resumes after the last handled message', async () => {
      const topic = unique('backlog');
      const group = unique('g');
      // More than one commit batch's worth, over several keys (so several partitions on Kafka).
      const backlog = Array.from({ length: 300 }, (_, i) => message(topic, `tenant-${i % 4}`, i));
      const bus1 = await openBus();
      await bus1.publish(backlog);
      const run1 = await collect(bus1, group, [topic]);
      await waitFor('the backlog', () => new Set(ids(run1.got)).size >= backlog.length);
      await run1.sub.stop();
      await bus1.close();

      const bus2 = await openBus();
      const sentinels = [0, 1, 2, 3].map((k) => message(topic, `tenant-${k}`, 1000 + k));
      const run2 = await collect(bus2, group, [topic]);
      await bus2.publish(sentinels);
      // Same keys, so in order behind anything redelivered: once every sentinel is in, a redelivery would show.
      await waitFor('the sentinels', () => sentinels.every((s) => run2.got.some((m) => m.id === s.id)));
      await run2.sub.stop();
      expect(ids(run1.got).sort()).toEqual(ids(backlog).sort());
      expect(ids(run2.got).sort()).toEqual(ids(sentinels).sort());
    });

    logicTest('a failing handler is reported to onError with its message', async () => {
      const reported: Array<{ err: unknown; id?: string }> = [];
      const bus = await openBus({ maxAttempts: 2, onError: (err, m) => reported.push({ err, id: m?.id }) });
      const topic = unique('reported');
      const [bad, good] = [message(topic, 'k', 0), message(topic, 'k', 1)];
      const handled: string[] = [];
      const sub = await bus.subscribe({
        group: unique('g'),
        topics: [topic],
        handler: async (m) => {
          if (m.id === bad.id) throw new PoisonMessageError('handler broke');
          handled.push(m.id);
        },
      });
      await bus.publish([bad, good]);
      await waitFor('the message behind', () => handled.includes(good.id));
      await sub.stop();
      const forBad = reported.filter((r) => r.id === bad.id);
      expect(forBad.map((r) => (r.err as Error).message)).toEqual(['handler broke', 'handler broke']);
      expect(reported.filter((r) => r.id === good.id)).toEqual([]);
    });

    logicTest('a failing handler gets the same message again and later messages wait', async () => {
      const bus = await openBus();
      const topic = unique('retry');
      const [a, b] = [message(topic, 'k', 0), message(topic, 'k', 1)];
      const attempts: string[] = [];
      const sub = await bus.subscribe({
        group: unique('g'),
        topics: [topic],
        handler: async (m) => {
          attempts.push(m.id);
          if (m.id === a.id && attempts.filter((x) => x === a.id).length <= 2) throw new Error('not yet');
        },
      });
      await bus.publish([a, b]);
      await waitFor('the second message', () => attempts.includes(b.id));
      await sub.stop();
      expect(attempts).toEqual([a.id, a.id, a.id, b.id]);
    });

    logicTest('a poison message is set aside after its attempts and the messages behind it flow', async () => {
      const errors: unknown[] = [];
      const bus = await openBus({ maxAttempts: 3 });
      const topic = unique('poison');
      const [poison, next] = [message(topic, 'k', 0), message(topic, 'k', 1)];
      const calls: string[] = [];
      const sub = await bus.subscribe({
        group: unique('g'),
        topics: [topic],
        handler: async (m) => {
          calls.push(m.id);
          if (m.id === poison.id) {
            errors.push(m.id);
            throw new PoisonMessageError('cannot ever handle this');
          }
        },
      });
      await bus.publish([poison, next]);
      await waitFor('the message behind the poison', () => calls.includes(next.id));
      await sub.stop();
      expect(calls).toEqual([poison.id, poison.id, poison.id, next.id]);
    });

    logicTest('a batch handler handles each message once and in order; a batch it fails goes through the handler one by one', async () => {
      const bus = await openBus({ maxAttempts: 2 });
      const topic = unique('batches');
      const backlog = Array.from({ length: 20 }, (_, i) => message(topic, 'k', i));
      const poison = backlog[7].id;
      const handled: string[] = [];
      const batches: string[][] = [];
      const poisonCalls: string[] = [];
      await bus.publish(backlog);
      const sub = await bus.subscribe({
        group: unique('g'),
        topics: [topic],
        handler: async (m) => {
          if (m.id === poison) {
            poisonCalls.push(m.id);
            throw new PoisonMessageError('cannot ever handle this');
          }
          handled.push(m.id);
        },
        handleBatch: async (ms) => {
          batches.push(ids(ms));
          if (ms.some((m) => m.id === poison)) throw new PoisonMessageError('a message of the batch cannot be handled');
          handled.push(...ids(ms));
        },
      });
      await waitFor('the backlog but the poison', () => handled.length >= backlog.length - 1);
      await sub.stop();
      const expected = ids(backlog).filter((id) => id !== poison);
      expect(handled).toEqual(expected);
      // The poison is set aside after its attempts through the handler, alone.
      expect(poisonCalls).toEqual([poison, poison]);
      // The bus used the batch handler, with runs of the log in order.
      expect(batches.length).toBeGreaterThan(0);
      for (const b of batches) {
        const at = ids(backlog).indexOf(b[0]);
        expect(b).toEqual(ids(backlog).slice(at, at + b.length));
      }
    });

    logicTest('a dependency down for longer than the attempt budget dead-letters nothing: the partition waits, then flows', async () => {
      // The budget is 3 calls with backoff capped at 200 ms: a bus that counted these failures toward it would
      // dead-letter the first message within a second. The "store" is down for 3 s.
      const bus = await openBus({ maxAttempts: 3, retryMaxMs: 200 });
      const topic = unique('outage');
      const group = unique('g');
      const sent = [0, 1, 2, 3].map((n) => message(topic, 'tenant-1', n));
      let storeDown = true;
      const applied: string[] = [];
      let failures = 0;
      const sub = await bus.subscribe({
        group,
        topics: [topic],
        handler: async (m) => {
          if (storeDown) {
            failures++;
            throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:27017'), { code: 'ECONNREFUSED' });
          }
          applied.push(m.id);
        },
      });
      await bus.publish(sent);
      await waitFor('failures past the attempt budget', () => failures >= 6);
      const stalled: StalledConsumer[] = bus.stalled();
      await new Promise((r) => setTimeout(r, 3000 - 200 * 3));
      expect(applied).toEqual([]); // nothing went past the waiting message
      storeDown = false;
      await waitFor('every message applied', () => applied.length >= sent.length);
      await sub.stop();
      expect(applied).toEqual(ids(sent)); // the first one too, in order: none was dead-lettered
      expect(stalled).toEqual([
        expect.objectContaining({ group, topic, attempts: expect.any(Number), error: 'connect ECONNREFUSED 127.0.0.1:27017' }),
      ]);
      expect(bus.stalled()).toEqual([]);
    });

    logicTest('a message id published twice is delivered once (embedded)', async () => {
      const bus = await openBus();
      // Kafka's idempotent producer only dedupes its own retries, not a second publish of the same id:
      // Kafka consumers rely on dedupe by id, so this guarantee is the embedded log's alone.
      if (bus.kind !== 'embedded') return;
      const topic = unique('dupes');
      const [a, b] = [message(topic, 'k', 0), message(topic, 'k', 1)];
      await bus.publish([a]);
      await bus.publish([a, b]);
      const { got, sub } = await collect(bus, unique('g'), [topic]);
      await waitFor('b', () => got.some((m) => m.id === b.id));
      await sub.stop();
      expect(ids(got)).toEqual([a.id, b.id]);
    });

    test('binary values and headers survive', async () => {
      const bus = await openBus();
      const topic = unique('binary');
      const bytes = new Uint8Array(512).map((_, i) => (i * 7) % 256);
      const headers = {
        traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
        'event-type': 'tenant.created',
        note: 'Zürich ✓ "quoted"',
      };
      // A view into a larger buffer: only its own bytes may be sent.
      const backing = new Uint8Array(600).fill(255);
      backing.set(bytes, 40);
      const sent: BusMessage[] = [
        { id: unique('bin'), topic, key: 'tenant-ü', value: backing.subarray(40, 40 + 512), headers },
        { id: unique('empty'), topic, key: 'tenant-ü', value: new Uint8Array(0), headers: {} },
      ];
      await bus.publish(sent);
      const { got, sub } = await collect(bus, unique('g'), [topic]);
      await waitFor('two messages', () => got.length >= 2);
      await sub.stop();

      expect(ids(got)).toEqual(ids(sent));
      expect(Buffer.from(got[0].value).equals(Buffer.from(bytes))).toBe(true);
      expect(got[0].headers).toEqual(headers);
      expect(got[0].key).toBe('tenant-ü');
      expect(got[1].value.byteLength).toBe(0);
      expect(got[1].headers).toEqual({});
    });

    logicTest('stop() waits for the in-flight handler', async () => {
      const bus = await openBus();
      const topic = unique('inflight');
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      let entered = false;
      let finished = false;
      const sub = await bus.subscribe({
        group: unique('g'),
        topics: [topic],
        handler: async () => {
          entered = true;
          await gate;
          finished = true;
        },
      });
      await bus.publish([message(topic, 'k', 0)]);
      await waitFor('the handler', () => entered);
      let stopped = false;
      const stopping = sub.stop().then(() => (stopped = true));
      await new Promise((r) => setTimeout(r, 100));
      expect(stopped).toBe(false);
      release();
      await stopping;
      expect(finished).toBe(true);
    });

    logicTest(
      'stop() does not wait out a retry backoff',
      async () => {
        const bus = await openBus();
        const topic = unique('backoff');
        let attempts = 0;
        const sub: Subscription = await bus.subscribe({
          group: unique('g'),
          topics: [topic],
          handler: async () => {
            attempts++;
            throw new Error('always failing');
          },
        });
        await bus.publish([message(topic, 'k', 0)]);
        // After the 6th failure (~3.1 s of backoff so far) the next retry is 3.2 s away.
        await waitFor('six attempts', () => attempts >= 6);
        const started = Date.now();
        await sub.stop();
        // Generous bound: a stop that slept through the backoff would take the full 3.2 s.
        expect(Date.now() - started).toBeLessThan(2500);
      },
      30_000,
    );
  });
}
