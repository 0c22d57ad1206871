import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { busContract, message, unique, waitFor } from './bus.contract';
import Database from 'better-sqlite3';
import { openEmbeddedBus, TOPICS_AFTER_SQL, type EmbeddedBus } from './embedded';
import { PoisonMessageError } from './poison';
import type { ReceivedMessage } from './types';

const dir = mkdtempSync(join(tmpdir(), 'embedded-bus-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

busContract('embedded', async (options) => openEmbeddedBus({ path: join(dir, 'contract.db'), ...options }));

test('waking consumers reads only the messages past the last seq announced, not the whole log', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'bus-plan-'));
  const bus = openEmbeddedBus({ path: join(dir, 'bus.db') });
  const db = new Database(join(dir, 'bus.db'), { readonly: true });
  try {
    const plan = (db.prepare(`EXPLAIN QUERY PLAN ${TOPICS_AFTER_SQL}`).all(0) as Array<{ detail: string }>).map((r) => r.detail);
    expect(plan).toEqual([expect.stringMatching(/^SEARCH messages USING INTEGER PRIMARY KEY \(rowid>\?\)$/)]);
  } finally {
    db.close();
    await bus.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a group of several topics woken for one reads that one, and every topic at its timed look', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'bus-fresh-'));
  const bus = openEmbeddedBus({ path: join(dir, 'bus.db'), pollIntervalMs: 2000 });
  const [a, b, c] = [unique('a'), unique('b'), unique('c')];
  const read = jest.spyOn(bus, 'read');
  const replays = jest.spyOn(bus, 'readReplays');
  const handled: string[] = [];
  try {
    const sub = await bus.subscribe({ group: unique('g'), topics: [a, b, c], handler: async (m) => void handled.push(m.id) });
    await waitFor('the first look at every topic', () => read.mock.calls.some(([, topics]) => topics.length === 3));
    // Now idle until the timed look, 2 s away: the wake for b reads b alone, with no replay query.
    await new Promise((r) => setTimeout(r, 50));
    read.mockClear();
    replays.mockClear();
    await bus.publish([message(b, 'k', 0)]);
    await waitFor('the message on b', () => handled.includes(`${b}-0`));
    expect(read.mock.calls[0][1]).toEqual([b]);
    expect(replays.mock.calls.filter(([, topics]) => topics.length === 1)).toEqual([]);
    // The timed look still reads all three (what no watch reported, say a write the watch missed).
    await waitFor('a timed look at every topic', () => read.mock.calls.some(([, topics]) => topics.length === 3));
    await sub.stop();
  } finally {
    await bus.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a batch handler gets what was read in one call, in order; a batch it fails goes through the handler one by one', async () => {
  const bus = openEmbeddedBus({ path: join(dir, 'batches.db'), maxAttempts: 2 });
  const topic = unique('batch');
  const group = unique('g');
  const backlog = Array.from({ length: 30 }, (_, i) => message(topic, `k${i % 3}`, i));
  // Message 17 cannot be decoded: its batch fails, then its handler calls set it aside alone.
  const poison = backlog[17].id;
  const batches: string[][] = [];
  const single: string[] = [];
  const done: string[] = [];
  await bus.publish(backlog);
  try {
    const sub = await bus.subscribe({
      group,
      topics: [topic],
      handler: async (m) => {
        single.push(m.id);
        if (m.id === poison) throw new PoisonMessageError('cannot decode');
        done.push(m.id);
      },
      handleBatch: async (ms) => {
        batches.push(ms.map((m) => m.id));
        if (ms.some((m) => m.id === poison)) throw new PoisonMessageError('a message of the batch cannot be decoded');
        done.push(...ms.map((m) => m.id));
      },
    });
    await waitFor('the backlog', () => done.length === backlog.length - 1);
    await sub.stop();
  } finally {
    await bus.close();
  }
  // The backlog was read at once: one batch of all thirty, in order; it failed, so each went through the handler.
  expect(batches).toEqual([backlog.map((m) => m.id)]);
  expect(single.filter((id) => id !== poison)).toEqual(backlog.map((m) => m.id).filter((id) => id !== poison));
  expect(done).toEqual(backlog.map((m) => m.id).filter((id) => id !== poison));
  const reopened = openEmbeddedBus({ path: join(dir, 'batches.db') });
  try {
    expect(reopened.deadLetters(group).map((d) => d.id)).toEqual([poison]);
    // Later messages come as a batch that succeeds, and the group's offsets moved past everything.
    const later = Array.from({ length: 5 }, (_, i) => message(topic, 'k0', 100 + i));
    const got: string[][] = [];
    const sub = await reopened.subscribe({
      group,
      topics: [topic],
      handler: async (m) => void got.push([m.id]),
      handleBatch: async (ms) => void got.push(ms.map((m) => m.id)),
    });
    await reopened.publish(later);
    await waitFor('the later messages', () => got.flat().length === later.length);
    await sub.stop();
    expect(got.flat()).toEqual(later.map((m) => m.id));
  } finally {
    await reopened.close();
  }
});

test('an operator lists a dead letter and replays it to its group, which then handles it', async () => {
  const bus = openEmbeddedBus({ path: join(dir, 'dead-letters.db'), maxAttempts: 2 });
  const topic = unique('dead');
  const group = unique('g');
  let healed = false;
  const handled: string[] = [];
  const sub = await bus.subscribe({
    group,
    topics: [topic],
    handler: async (m) => {
      if (m.id.endsWith('-0') && !healed) throw new PoisonMessageError('downstream refuses it');
      handled.push(m.id);
    },
  });
  await bus.publish([message(topic, 'k', 0), message(topic, 'k', 1)]);
  await waitFor('the message behind', () => handled.includes(`${topic}-1`));
  const [dead] = bus.deadLetters(group);
  expect(dead).toMatchObject({ group, topic, id: `${topic}-0`, attempts: 2, error: 'downstream refuses it' });

  healed = true; // the cause is fixed; the operator replays it
  expect(bus.replayDeadLetter(group, topic, dead.seq)).toBe(true);
  expect(bus.replayDeadLetter(group, topic, dead.seq)).toBe(false); // once
  await waitFor('the replayed message', () => handled.includes(`${topic}-0`));
  expect(bus.deadLetters(group)).toEqual([]);
  expect(handled).toEqual([`${topic}-1`, `${topic}-0`]);
  await sub.stop();
  await bus.close();
});

const repoRoot = resolve(__dirname, '../../../..');

/** Runs a fixture script as a separate Node process (TypeScript through tsx), like a second service would. */
function runFixture(name: string, args: string[]): { child: ChildProcess; lines: string[]; exit: Promise<number | null> } {
  const child = spawn(process.execPath, ['--import', 'tsx', join(__dirname, 'fixtures', name), ...args], {
    cwd: repoRoot,
    stdio: ['pipe', 'pipe', 'pipe'], // stdin closes when this process dies, and fixtures that run until killed exit
  });
  const lines: string[] = [];
  let partial = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    const parts = (partial + chunk.toString()).split('\n');
    partial = parts.pop()!;
    lines.push(...parts);
  });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exit = new Promise<number | null>((done) =>
    child.on('exit', (code) => {
      if (code) process.stderr.write(`fixture ${name} failed:\n${stderr}`);
      done(code);
    }),
  );
  return { child, lines, exit };
}

describe('embedded bus across processes', () => {
  const buses: EmbeddedBus[] = [];
  const children: ChildProcess[] = [];
  afterEach(async () => {
    for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    await Promise.all(buses.splice(0).map((b) => b.close()));
  });
  const open = (path: string, leaseMs?: number) => {
    const bus = openEmbeddedBus({ path, leaseMs });
    buses.push(bus);
    return bus;
  };

  test('another process publishes while this one publishes and consumes', async () => {
    const path = join(dir, 'xproc.db');
    const bus = open(path);
    const topic = unique('xproc');
    const got: ReceivedMessage[] = [];
    await bus.subscribe({ group: unique('g'), topics: [topic], handler: async (m) => void got.push(m) });

    const child = runFixture('publish.ts', [path, topic, '300', '10']);
    children.push(child.child);
    const mine = Array.from({ length: 100 }, (_, i) => message(topic, `k${i % 4}`, i, `${topic}-parent-${i}`));
    for (let i = 0; i < mine.length; i += 5) {
      await bus.publish(mine.slice(i, i + 5));
      await new Promise((r) => setTimeout(r, 1));
    }
    expect(await child.exit).toBe(0);
    await waitFor('400 messages', () => got.length >= 400);

    const fromChild = got.filter((m) => m.headers.from === 'child').map((m) => m.id);
    const fromParent = got.filter((m) => m.headers.from !== 'child').map((m) => m.id);
    expect(fromChild).toEqual(Array.from({ length: 300 }, (_, i) => `${topic}-child-${i}`));
    expect(fromParent).toEqual(mine.map((m) => m.id));
    expect(new Set(got.map((m) => m.id)).size).toBe(400);
    const seqs = got.map((m) => Number(m.offset));
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
  }, 60_000);

  test('one consumer per group at a time; a closed owner hands over without loss or duplicates', async () => {
    const path = join(dir, 'lease.db');
    const topic = unique('lease');
    const group = unique('g');
    const [a, b] = [open(path, 2000), open(path, 2000)];
    const got: Array<{ by: EmbeddedBus; id: string }> = [];
    for (const bus of [a, b]) {
      await bus.subscribe({ group, topics: [topic], handler: async (m) => void got.push({ by: bus, id: m.id }) });
    }
    const first = Array.from({ length: 50 }, (_, i) => message(topic, `k${i % 3}`, i));
    await a.publish(first);
    await waitFor('first batch', () => got.length >= 50);
    const owner = got[0].by;
    const standby = owner === a ? b : a;
    expect(got.every((g) => g.by === owner)).toBe(true);

    await owner.close();
    const second = Array.from({ length: 50 }, (_, i) => message(topic, `k${i % 3}`, 50 + i));
    await standby.publish(second);
    await waitFor('second batch', () => got.length >= 100);
    // A sentinel on one key proves nothing else is still on its way.
    const sentinel = message(topic, 'k0', 1000);
    await standby.publish([sentinel]);
    await waitFor('sentinel', () => got.some((g) => g.id === sentinel.id));

    expect(got.map((g) => g.id)).toEqual([...first, ...second, sentinel].map((m) => m.id));
    expect(got.slice(50).every((g) => g.by === standby)).toBe(true);
  }, 60_000);

  test("a crashed owner's lease expires and a standby takes over from its committed offset", async () => {
    const path = join(dir, 'crash.db');
    const topic = unique('crash');
    const group = unique('g');
    const bus = open(path, 1000);
    const before = Array.from({ length: 20 }, (_, i) => message(topic, 'k', i));
    await bus.publish(before);

    const consumer = runFixture('consume.ts', [path, group, topic, '1000']);
    children.push(consumer.child);
    await waitFor('the other process to consume', () => consumer.lines.length >= 20, 30_000);

    // This process joins as a standby while the other one holds the lease.
    const got: string[] = [];
    await bus.subscribe({ group, topics: [topic], handler: async (m) => void got.push(m.id) });
    const during = Array.from({ length: 10 }, (_, i) => message(topic, 'k', 20 + i));
    await bus.publish(during);
    await waitFor('the owner to consume more', () => consumer.lines.length >= 30, 30_000);

    consumer.child.kill('SIGKILL');
    await consumer.exit;
    const after = Array.from({ length: 10 }, (_, i) => message(topic, 'k', 30 + i));
    await bus.publish(after);
    await waitFor('takeover', () => got.includes(after[9].id), 30_000);

    expect(consumer.lines).toEqual([...before, ...during].map((m) => m.id));
    // At least once: a batch is committed at its end, so the batch in flight at the kill (`during`, published after
    // `before` was handled) may come again; nothing of a batch committed before it does.
    const redelivered = got.filter((id) => consumer.lines.includes(id));
    const inFlight = during.map((m) => m.id);
    expect(redelivered.every((id) => inFlight.includes(id))).toBe(true);
    expect(got.filter((id) => !consumer.lines.includes(id))).toEqual(after.map((m) => m.id));
  }, 60_000);

  test("another process's publish wakes the consumers of its topic only; a message committed with no signal is found by the safety poll", async () => {
    const path = join(dir, 'signals.db');
    const [mine, other, unsignalled] = [unique('mine'), unique('other'), unique('unsignalled')];
    const bus = openEmbeddedBus({ path, pollIntervalMs: 60_000 });
    buses.push(bus);
    const got: string[] = [];
    const read = jest.spyOn(bus, 'read');
    await bus.subscribe({ group: unique('g'), topics: [mine], handler: async (m) => void got.push(m.id) });
    await waitFor('the first look', () => read.mock.calls.length > 0);
    const looks = jest.spyOn(bus, 'newSince');

    // 50 messages on a topic nobody here consumes: no wake-up, not even the query that finds which topics moved.
    const others = runFixture('publish.ts', [path, other, '50', '5']);
    children.push(others.child);
    expect(await others.exit).toBe(0);
    await new Promise((r) => setTimeout(r, 200));
    expect(looks).not.toHaveBeenCalled();

    // On our topic: delivered long before the 60 s safety poll.
    const ours = runFixture('publish.ts', [path, mine, '10', '5']);
    children.push(ours.child);
    expect(await ours.exit).toBe(0);
    await waitFor('the messages on our topic', () => got.length >= 10, 10_000);
    expect(got).toEqual(Array.from({ length: 10 }, (_, i) => `${mine}-child-${i}`));

    // A publisher that committed and died before its signal (or one that never sends any): the safety poll finds it.
    const polling = openEmbeddedBus({ path, pollIntervalMs: 300 });
    buses.push(polling);
    const late: string[] = [];
    await polling.subscribe({ group: unique('g'), topics: [unsignalled], handler: async (m) => void late.push(m.id) });
    const raw = new Database(path);
    try {
      raw.pragma('busy_timeout = 5000');
      raw
        .prepare('INSERT INTO messages (id, topic, key, value, headers, ts) VALUES (?, ?, ?, ?, ?, ?)')
        .run(`${unsignalled}-0`, unsignalled, 'k', Buffer.from('x'), '{}', Date.now());
    } finally {
      raw.close();
    }
    await waitFor('the message with no signal', () => late.length >= 1, 10_000);
    expect(late).toEqual([`${unsignalled}-0`]);
  }, 60_000);

  test('prune deletes old messages only', async () => {
    const bus = open(join(dir, 'prune.db'));
    const topic = unique('prune');
    await bus.publish([message(topic, 'k', 0)]);
    expect(bus.prune(60_000)).toBe(0);
    await new Promise((r) => setTimeout(r, 5));
    expect(bus.prune(0)).toBe(1);
  });
});
