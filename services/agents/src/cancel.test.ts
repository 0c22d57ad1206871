/**
 * Cancelling a run gives back the reservation of a model call nobody will bill: the run's call while queued (as
 * before), and now also a running run's call its worker has not sent yet (claimed, still preparing). A sent call is
 * left to its worker, which bills it cut. Checked on a real store and bus: the `llm.usage` events the cancel writes.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Metadata } from '@grpc/grpc-js';
import { openBus, openSqliteStore, OutboxRelay, SecretBox, type EventBus, type Store } from '@svc/kit';
import { decodeDomainEvent, TOPICS } from '@svc/contracts';
import { DEFAULT_CONFIG } from './agent-config';
import { queuedRun, runs, type RunCall, type RunDoc } from './collections';
import { noCreditLimit } from './credits';
import { runHandlers, type RunHandlerDeps } from './handlers/runs';

let dir: string;
let store: Store;
let bus: EventBus;
let relay: OutboxRelay;
let handlers: ReturnType<typeof runHandlers>;
const aborted: string[] = [];

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'agents-cancel-'));
  store = await openSqliteStore({ path: join(dir, 'agents.db') });
  await store.ensure(runs);
  bus = openBus({ clientId: 'test', embeddedPath: join(dir, 'bus.db') });
  relay = new OutboxRelay(store, bus);
  relay.start();
  const deps = {
    store,
    relay,
    box: new SecretBox([{ id: 'k1', key: randomBytes(32) }]),
    credits: noCreditLimit,
    defaultMaxTokens: 1024,
    worker: { notify() {}, abort: (id: string) => void aborted.push(id) },
  } as unknown as RunHandlerDeps; // cancel needs neither identity nor projects
  handlers = runHandlers(deps);
});
afterEach(async () => {
  await relay.stop();
  await bus.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const ctx = {
  auth: { sub: 'usr_1', tid: 'ten_1', typ: 'user', role: 'owner', sid: 'ses_1' },
  token: 'token',
  requestId: 'req_1',
  clientIp: null,
  metadata: new Metadata(),
} as any;

const call = (patch: Partial<RunCall> = {}): RunCall => ({
  id: `call_${Math.random().toString(36).slice(2)}`,
  promptTokens: 10,
  streamed: 0,
  usage: null,
  provider: 'openai',
  model: 'gpt-test',
  keySource: 'tenant',
  ...patch,
});

async function insertRun(patch: Partial<RunDoc>): Promise<RunDoc> {
  const doc = queuedRun({
    tenantId: 'ten_1',
    agentId: 'agt_1',
    projectId: 'prj_1',
    goal: 'g',
    agent: { name: 'a', systemPrompt: '', config: DEFAULT_CONFIG },
    delegate: 'sealed',
    delegateScopes: [],
    credentialId: 'usr_1',
    credentialType: 'user',
    call: null,
  });
  return store.collection(runs).insert({ ...doc, ...patch });
}

/** The usage events written so far, by call id. */
async function usageByCall(): Promise<Map<string, { inputTokens: number; outputTokens: number }>> {
  await relay.flush();
  const out = new Map<string, { inputTokens: number; outputTokens: number }>();
  const sub = await bus.subscribe({
    group: `g-${Math.random()}`,
    topics: [TOPICS.agents],
    handler: async (m) => {
      const e = decodeDomainEvent(m.value);
      if (e.data?.$case === 'usage')
        out.set(e.data.value.callId, { inputTokens: e.data.value.inputTokens, outputTokens: e.data.value.outputTokens });
    },
  });
  await new Promise((r) => setTimeout(r, 300));
  await sub.stop();
  return out;
}

it('releases the reservation of a running run whose call was never sent', async () => {
  const unsent = call({ sent: false });
  const run = await insertRun({ status: 'running', call: unsent, leaseWorker: 'w1', leaseGen: 1 });
  const res = await handlers.cancelRun({ agentId: 'agt_1', runId: run.id }, ctx);
  expect(res.run!.status).toBe('cancelled');
  expect(aborted).toContain(run.id);
  expect((await store.collection(runs).get(run.id))!.call).toBeNull();
  // A zero usage for the call: billing closes its reservation with nothing debited.
  expect((await usageByCall()).get(unsent.id)).toEqual({ inputTokens: 0, outputTokens: 0 });
});

it('leaves a sent call to its worker (billed cut), and still releases a queued run’s call', async () => {
  const sent = call({ sent: true, streamed: 40 });
  const running = await insertRun({ status: 'running', call: sent, leaseWorker: 'w1', leaseGen: 1 });
  const held = call();
  const queued = await insertRun({ status: 'queued', call: held });
  await handlers.cancelRun({ agentId: 'agt_1', runId: running.id }, ctx);
  await handlers.cancelRun({ agentId: 'agt_1', runId: queued.id }, ctx);
  expect((await store.collection(runs).get(running.id))!.call).toEqual(sent);
  const usage = await usageByCall();
  expect(usage.has(sent.id)).toBe(false);
  expect(usage.get(held.id)).toEqual({ inputTokens: 0, outputTokens: 0 });
});
