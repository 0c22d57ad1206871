/**
 * The worker's claim and take-over rules on a real store and bus. The runs here never reach an LLM: their delegated
 * token is not a JWT, so each one the worker drives ends `failed` at once (or, with a token, identity's address is
 * closed). What is checked is who claimed each run, how often, and which events were written with it.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { SignJWT } from 'jose';
import { createClient, createLogger, nowIso, openBus, openSqliteStore, OutboxRelay, SecretBox, type EventBus, type Store } from '@svc/kit';
import { decodeDomainEvent, TOPICS } from '@svc/contracts';
import { sendHttp } from '@svc/llm';
import { identityV1, projectsV1 } from '@svc/proto';
import { DEFAULT_CONFIG } from './agent-config';
import { queuedRun, runs, type RunDoc } from './collections';
import { noCreditLimit } from './credits';
import type { LoopDeps } from './run-loop';
import { RunWorker, type WorkerOptions } from './worker';

let dir: string;
let store: Store;
let bus: EventBus;
let relay: OutboxRelay;
const box = new SecretBox([{ id: 'k1', key: randomBytes(32) }]);
const logger = createLogger('worker-test', 'silent');
const identity = createClient(identityV1.IdentityServiceService, '127.0.0.1:1', { deadlineMs: 200 });
const projects = createClient(projectsV1.ProjectsServiceService, '127.0.0.1:1', { deadlineMs: 200 });
const deps: LoopDeps = {
  identity,
  projects,
  box,
  llmTransport: sendHttp,
  credits: noCreditLimit,
  defaultMaxTokens: 1024,
  logger,
  llmTimeoutMs: 1000,
  llmMaxRetries: 0,
  stepRetries: 0,
  retryBaseMs: 0,
  pricing: { creditsPerUsd: 1000, creditsPer1kTokens: 1 },
};
const workers: RunWorker[] = [];

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'agents-worker-'));
  store = await openSqliteStore({ path: join(dir, 'agents.db') });
  await store.ensure(runs);
  bus = openBus({ clientId: 'test', embeddedPath: join(dir, 'bus.db') });
  relay = new OutboxRelay(store, bus);
  relay.start();
});
afterEach(async () => {
  for (const w of workers.splice(0)) await w.stop();
  await relay.stop();
  await bus.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});
afterAll(() => {
  identity.close();
  projects.close();
});

const NOT_A_JWT = box.encrypt('not-a-jwt');

async function delegateToken(): Promise<string> {
  const token = await new SignJWT({ tid: 'ten_1', scp: ['projects:read'] })
    .setProtectedHeader({ alg: 'HS256' })
    .setExpirationTime('1h')
    .sign(randomBytes(32));
  return box.encrypt(token);
}

async function insertRun(patch: Partial<RunDoc> = {}): Promise<RunDoc> {
  const doc: RunDoc = {
    ...queuedRun({
      tenantId: 'ten_1',
      agentId: 'agt_1',
      projectId: 'prj_1',
      goal: 'g',
      agent: { name: 'a', systemPrompt: '', config: DEFAULT_CONFIG },
      delegate: NOT_A_JWT,
      delegateScopes: ['projects:read'],
    }),
    budgetLeftMs: 60_000,
    ...patch,
  };
  return store.collection(runs).insert(doc);
}

function worker(options: Partial<WorkerOptions> = {}, loopDeps: LoopDeps = deps): RunWorker {
  const w = new RunWorker(store, relay, logger, loopDeps, {
    workerId: 'w1',
    concurrency: 4,
    tenantConcurrency: 100,
    pollMs: 10,
    leaseMs: 5000,
    maxAttempts: 3,
    ...options,
  });
  workers.push(w);
  w.start();
  return w;
}

async function settled(ids: string[]): Promise<RunDoc[]> {
  for (;;) {
    const docs = await Promise.all(ids.map((id) => store.collection(runs).get(id)));
    if (docs.every((d) => d && ['failed', 'completed', 'cancelled'].includes(d.status))) return docs as RunDoc[];
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The agent.* events on the bus, read until `failures` agent.failed events arrived. */
async function eventsOf(failures: number): Promise<Array<{ type: string; runId: string }>> {
  await relay.flush();
  const out: Array<{ type: string; runId: string }> = [];
  const sub = await bus.subscribe({
    group: `g-${Math.random()}`,
    topics: [TOPICS.agents],
    handler: async (m) => {
      const e = decodeDomainEvent(m.value);
      if (e.data?.$case === 'agentRun') out.push({ type: e.type, runId: e.data.value.runId });
    },
  });
  for (let i = 0; i < 200 && out.filter((e) => e.type === 'agent.failed').length < failures; i++)
    await new Promise((r) => setTimeout(r, 20));
  await sub.stop();
  return out;
}

it('two workers on one store claim each queued run exactly once', async () => {
  const ids: string[] = [];
  for (let i = 0; i < 24; i++) ids.push((await insertRun()).id);
  worker({ workerId: 'a' });
  worker({ workerId: 'b' });
  const docs = await settled(ids);
  for (const d of docs) {
    expect(d.attempts).toBe(1);
    expect(d.status).toBe('failed');
    expect(d.leaseOwner).toBeNull();
  }
  // Each run announced its start and its end once.
  const events = await eventsOf(ids.length);
  for (const id of ids) {
    expect(events.filter((e) => e.runId === id).map((e) => e.type)).toEqual(['agent.started', 'agent.failed']);
  }
});

/** A lease another worker holds, as it stored it. */
const held = (worker: string, patch: Partial<RunDoc> = {}): Partial<RunDoc> => ({
  status: 'running',
  startedAt: nowIso(),
  leaseWorker: worker,
  leaseOwner: `${worker}/1`,
  leaseGen: 1,
  leaseBeat: 0,
  leaseWaitMs: 5000,
  attempts: 1,
  ...patch,
});

/** Beats a run's lease every 20 ms as its live holder on another machine would, until the returned stop is called. */
function beating(id: string): () => void {
  const timer = setInterval(() => void store.collection(runs).increment(id, {}, { leaseBeat: 1 }), 20);
  return () => clearInterval(timer);
}

it('at start-up takes back at once the runs it had claimed before dying, and fails a run interrupted too often', async () => {
  const mine = await insertRun(held('w1', { leaseOwner: 'w1/dead' }));
  const tooOften = await insertRun(held('w1', { leaseOwner: 'w1/dead', attempts: 3 }));
  const othersLive = await insertRun(held('w2'));
  const othersSilent = await insertRun(held('w3'));
  const stopBeating = beating(othersLive.id);
  // This worker's clock runs ten times fast: the silent holder's beat stands still for its whole 5 s lease after
  // half a second, while the live holder beats every 20 ms (a clock that jumped 5 s at once could see one beat twice
  // on a loaded machine, before the next one came).
  const t0 = performance.now();
  worker({ workerId: 'w1', now: () => (performance.now() - t0) * 10 });
  const [a, b, d] = await settled([mine.id, tooOften.id, othersSilent.id]);
  stopBeating();
  expect(a.attempts).toBe(2); // taken back and driven (it then failed: no LLM reachable here)
  expect(a.error).not.toMatch(/^worker_lost/);
  expect(b.error).toMatch(/^worker_lost: the run was interrupted 3 times/);
  expect(b.attempts).toBe(3);
  expect(d.attempts).toBe(2);
  expect(d.leaseGen).toBe(2);
  // A live lease of another worker is left alone, however much time passed on this worker's clock.
  const c = await store.collection(runs).get(othersLive.id);
  expect(c).toMatchObject({ status: 'running', leaseOwner: 'w2/1', leaseGen: 1, attempts: 1 });
  const events = await eventsOf(3);
  expect(events.filter((e) => e.runId === tooOften.id).map((e) => e.type)).toEqual(['agent.failed']);
});

it('hands a run back when a service it needs is unavailable, and fails it after AGENTS_MAX_ATTEMPTS claims', async () => {
  const run = await insertRun({ delegate: await delegateToken() });
  worker({ maxAttempts: 2 });
  const [done] = await settled([run.id]);
  expect(done.status).toBe('failed');
  expect(done.attempts).toBe(2);
  expect(done.error).toMatch(/^worker_lost: /);
  const events = await eventsOf(1);
  expect(events.filter((e) => e.runId === run.id).map((e) => e.type)).toEqual(['agent.started', 'agent.failed']);
});

it("skips a tenant at its limit: B's newer run starts while A's older ones wait for A's own", async () => {
  // A already runs two (driven by another worker that holds their leases) and has two more queued, older than B's.
  for (let i = 0; i < 2; i++) await insertRun({ tenantId: 'ten_a', ...held('other') });
  const aQueued = [(await insertRun({ tenantId: 'ten_a' })).id, (await insertRun({ tenantId: 'ten_a' })).id];
  const bRun = (await insertRun({ tenantId: 'ten_b' })).id;
  worker({ tenantConcurrency: 2 });
  const [b] = await settled([bRun]);
  expect(b.attempts).toBe(1);
  for (const id of aQueued) expect(await store.collection(runs).get(id)).toMatchObject({ status: 'queued', attempts: 0 });
});

/**
 * A peer that accepts connections and never answers: a run whose identity lookup goes there stays in flight (its
 * lease beating) until the call's deadline, or until `close` drops the connections (the call then fails at once).
 */
async function silentPeer(): Promise<{ addr: string; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  return {
    addr: `127.0.0.1:${port}`,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}

/** Every clock of this process 30 s ahead from now on (what an observer on a machine 30 s ahead sees). */
function skewWallClock(ms: number): void {
  const real = Date.now.bind(Date);
  jest.spyOn(Date, 'now').mockImplementation(() => real() + ms);
}

describe('under clock skew', () => {
  afterEach(() => jest.restoreAllMocks());

  it('an observer whose clock is 30 s ahead does not take over a live run whose holder keeps beating', async () => {
    const peer = await silentPeer();
    const silentIdentity = createClient(identityV1.IdentityServiceService, peer.addr, { deadlineMs: 20_000 });
    try {
      const run = await insertRun({ delegate: await delegateToken() });
      const a = worker({ workerId: 'a', leaseMs: 600 }, { ...deps, identity: silentIdentity });
      for (let i = 0; i < 200 && (await store.collection(runs).get(run.id))?.leaseOwner !== a.owner; i++)
        await new Promise((r) => setTimeout(r, 10));
      skewWallClock(30_000);
      const beatBefore = (await store.collection(runs).get(run.id))!.leaseBeat!;
      worker({ workerId: 'b', leaseMs: 600, now: () => performance.now() + 30_000 }, { ...deps, identity: silentIdentity });
      // Four lease lengths: the holder beats every 200 ms, so the observer never sees its beat stand still for 600.
      await new Promise((r) => setTimeout(r, 2400));
      const doc = await store.collection(runs).get(run.id);
      expect(doc).toMatchObject({ status: 'running', leaseOwner: a.owner, leaseGen: 1, attempts: 1 });
      expect(doc!.leaseBeat).toBeGreaterThan(beatBefore);
    } finally {
      await peer.close();
      for (const w of workers.splice(0)) await w.stop();
      silentIdentity.close();
    }
  });

  it("a run taken over under a 30 s clock skew: the old holder's result is refused; the run ends once", async () => {
    const peer = await silentPeer();
    // The holder's identity lookup hangs past the run's 1 s budget: it then records `time_budget_exceeded`.
    const silentIdentity = createClient(identityV1.IdentityServiceService, peer.addr, { deadlineMs: 1500 });
    try {
      const run = await insertRun({ delegate: await delegateToken(), budgetLeftMs: 1000 });
      const a = worker({ workerId: 'a', leaseMs: 5000, maxAttempts: 2 }, { ...deps, identity: silentIdentity });
      for (let i = 0; i < 200 && (await store.collection(runs).get(run.id))?.leaseOwner !== a.owner; i++)
        await new Promise((r) => setTimeout(r, 10));
      skewWallClock(30_000);
      // The observer's clock runs 100 times fast: to it the holder looks stopped (a paused or cut-off machine).
      const start = performance.now();
      const b = worker({ workerId: 'b', leaseMs: 5000, maxAttempts: 2, now: () => 30_000 + (performance.now() - start) * 100 });
      for (let i = 0; i < 300 && (await store.collection(runs).get(run.id))?.attempts !== 2; i++)
        await new Promise((r) => setTimeout(r, 10));
      // Taken over with a new generation. The new holder cannot reach identity (its address is closed): it hands the
      // run back and, at its third claim, it fails as interrupted too often: its end, written once.
      const [done] = await settled([run.id]);
      expect(done.error).toMatch(/^worker_lost: /);
      expect(done.leaseGen).toBeGreaterThanOrEqual(2);
      // The first holder's result (the budget ran out during its lookup) comes later and is refused by the fence.
      await new Promise((r) => setTimeout(r, 1800));
      const after = await store.collection(runs).get(run.id);
      expect(after).toMatchObject({ status: 'failed', error: done.error, rev: done.rev });
      expect(after!.error).not.toMatch(/time_budget_exceeded/);
      const events = await eventsOf(1);
      expect(events.filter((e) => e.runId === run.id).map((e) => e.type)).toEqual(['agent.started', 'agent.failed']);
      expect(b.owner).not.toBe(a.owner);
    } finally {
      await peer.close();
      for (const w of workers.splice(0)) await w.stop();
      silentIdentity.close();
    }
  });
});

it("takes at once a run whose holder process on this host is gone, and leaves a live replica's runs alone", async () => {
  const host = hostname();
  const ended = spawn(process.execPath, ['-e', '']);
  await new Promise((r) => ended.once('exit', r));
  // Both held under the host name as the worker name, as replicas of one host once shared it.
  const orphan = await insertRun(held(host, { leaseOwner: `${host}/${ended.pid}/gone` }));
  const live = await insertRun(held(host, { leaseOwner: `${host}/${process.ppid}/live` }));
  const stopBeating = beating(live.id);
  worker({ workerId: undefined });
  const deadline = Date.now() + 3000;
  let taken: RunDoc | null = null;
  while (Date.now() < deadline && !(taken && taken.attempts === 2)) {
    taken = await store.collection(runs).get(orphan.id);
    await new Promise((r) => setTimeout(r, 20));
  }
  stopBeating();
  expect(taken).toMatchObject({ attempts: 2, leaseGen: 2 });
  expect(await store.collection(runs).get(live.id)).toMatchObject({
    status: 'running',
    leaseOwner: `${host}/${process.ppid}/live`,
    attempts: 1,
  });
});
