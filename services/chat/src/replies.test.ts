/**
 * Reply leases between two chat processes on one real SQLite store, with a reply streamed from a local server that
 * speaks the OpenAI wire protocol. The second process's sweeper has an injected clock: what is checked is whether a
 * live reply is failed, and whose writes count once it is.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, newId, nowIso, openBus, openSqliteStore, OutboxRelay, type EventBus, type Store } from '@svc/kit';
import { decodeDomainEvent, TOPICS } from '@svc/contracts';
import { planCall, sendHttp, type LlmTransport } from '@svc/llm';
import { fakeEmbedding, startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { messages, nextSeq, type MessageDoc } from './collections';
import { Replies, type ReplyTimings } from './replies';

const API_KEY = 'sk-replies-test-' + 'r'.repeat(32);
const logger = createLogger('replies-test', 'silent');
let dir: string;
let store: Store;
let bus: EventBus;
let relay: OutboxRelay;
let fake: FakeProviderServer;
const processes: Replies[] = [];

beforeAll(async () => {
  fake = await startFakeOpenAI({ apiKey: API_KEY });
});
afterAll(() => fake.close());
beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'chat-replies-'));
  store = await openSqliteStore({ path: join(dir, 'chat.db') });
  await store.ensure(messages);
  bus = openBus({ clientId: 'test', embeddedPath: join(dir, 'bus.db') });
  relay = new OutboxRelay(store, bus);
  relay.start();
});
afterEach(async () => {
  jest.restoreAllMocks();
  for (const p of processes.splice(0)) await p.stop();
  await relay.stop();
  await bus.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

function chatProcess(timings: Partial<ReplyTimings> = {}): Replies {
  const p = new Replies(store, relay, logger, sendHttp, { flushMs: 50, leaseMs: 300, drainMs: 5000, ...timings });
  processes.push(p);
  return p;
}

/** A pending assistant reply of `p`'s, as chat stores one before generating it. */
function pendingDoc(p: Replies, extra: Partial<MessageDoc> = {}): MessageDoc {
  return {
    id: newId('msg'),
    tenantId: 'ten_1',
    sessionId: 'ses_1',
    role: 'assistant',
    content: '',
    projectId: '',
    status: 'pending',
    seq: nextSeq(),
    errorCode: null,
    errorMessage: null,
    inputTokens: null,
    outputTokens: null,
    ...p.newLease(),
    createdAt: nowIso(),
    completedAt: null,
    ...extra,
  };
}

/** Stores a pending reply and starts generating it in `p`; the model streams `words` words, one every 50 ms. */
async function reply(p: Replies, words: number): Promise<{ doc: MessageDoc; text: string }> {
  const text = Array.from({ length: words }, (_, i) => `w${i}`).join(' ');
  fake.script({ type: 'text', text, delayMs: 50, usage: { inputTokens: 7, outputTokens: words } });
  const doc = pendingDoc(p);
  await store.collection(messages).insert(doc);
  p.start({
    tenantId: 'ten_1',
    message: doc,
    history: [{ role: 'user', content: 'talk' }],
    llm: { settings: { provider: 'openai', baseUrl: fake.url, apiKey: API_KEY, model: 'gpt-fake' }, keySource: 'tenant' },
  });
  return { doc, text };
}

/** Sweeps with `observer` every `everyMs` until `p` has no reply running. */
async function sweepWhileRunning(observer: Replies, p: Replies, everyMs: number): Promise<void> {
  while (p.size > 0) {
    await observer.sweep();
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** Every clock of this process `ms` ahead from now on (what a process on a machine that far ahead sees). */
function skewWallClock(ms: number): void {
  const real = Date.now.bind(Date);
  jest.spyOn(Date, 'now').mockImplementation(() => real() + ms);
}

/** The llm.usage events of the chat topic for one reply, read from the bus. */
async function usageOf(messageId: string): Promise<Array<{ inputTokens: number; outputTokens: number }>> {
  await relay.flush();
  const out: Array<{ inputTokens: number; outputTokens: number }> = [];
  const sub = await bus.subscribe({
    group: `g-${Math.random()}`,
    topics: [TOPICS.chat],
    handler: async (m) => {
      const e = decodeDomainEvent(m.value);
      if (e.data?.$case === 'usage' && e.data.value.sourceId === messageId) out.push(e.data.value);
    },
  });
  for (let i = 0; i < 50 && out.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
  await new Promise((r) => setTimeout(r, 100)); // a second event, if any, arrives too
  await sub.stop();
  return out;
}

it('a process whose clock is 30 s ahead does not fail a reply another process is streaming', async () => {
  const a = chatProcess();
  const { doc, text } = await reply(a, 30);
  await new Promise((r) => setTimeout(r, 200)); // streaming, its lease beating
  skewWallClock(30_000);
  const b = chatProcess({ now: () => performance.now() + 30_000 });
  await sweepWhileRunning(b, a, 50);
  const stored = await store.collection(messages).get(doc.id);
  expect(stored).toMatchObject({ status: 'completed', content: text, outputTokens: 30 });
  expect(await usageOf(doc.id)).toHaveLength(1);
});

it("a reply failed by another process under a 30 s clock skew: the old generator's text and end are refused, its call is billed once", async () => {
  const a = chatProcess();
  const { doc, text } = await reply(a, 30);
  await new Promise((r) => setTimeout(r, 300));
  skewWallClock(30_000);
  // The observer's clock runs 100 times fast: to it the generator looks stopped (a paused or cut-off machine).
  const start = performance.now();
  const b = chatProcess({ now: () => 30_000 + (performance.now() - start) * 100 });
  let failedWith: MessageDoc | null = null;
  for (let i = 0; i < 400 && !failedWith; i++) {
    await b.sweep();
    const m = await store.collection(messages).get(doc.id);
    if (m?.status === 'failed') failedWith = m;
  }
  expect(failedWith).toMatchObject({ status: 'failed', errorCode: 'REPLY_INTERRUPTED' });
  while (a.size > 0) await new Promise((r) => setTimeout(r, 20));
  // The generator went on to the end of the text, but wrote nothing more: the reply stays as it was failed.
  const stored = await store.collection(messages).get(doc.id);
  expect(stored).toEqual(failedWith);
  expect(stored!.content.length).toBeLessThan(text.length);
  // The model call was made and paid for: billed once, by the generator, for what the provider reported.
  expect(await usageOf(doc.id)).toEqual([expect.objectContaining({ inputTokens: 7, outputTokens: 30, estimated: false })]);
});

it("the sweep of a dead process's replies bills what was stored of each, once, and releases the reservation of one that produced nothing", async () => {
  const call = {
    provider: 'openai',
    model: 'gpt-fake',
    keySource: 'tenant',
    credentialId: 'key_1',
    credentialType: 'api_key',
    promptTokens: 12,
  };
  const dead = (fields: Partial<MessageDoc>): MessageDoc => ({
    id: newId('msg'),
    tenantId: 'ten_1',
    sessionId: 'ses_1',
    role: 'assistant',
    content: '',
    projectId: '',
    status: 'streaming',
    seq: nextSeq(),
    errorCode: null,
    errorMessage: null,
    inputTokens: null,
    outputTokens: null,
    leaseBeat: 3,
    leaseMs: 300,
    call,
    createdAt: nowIso(),
    completedAt: null,
    ...fields,
  });
  // Cut mid-text; answered in full with the provider's usage stored; nothing streamed yet.
  const cut = dead({ content: 'x'.repeat(40) });
  const answered = dead({ content: 'full answer', inputTokens: 15, outputTokens: 3 });
  const empty = dead({ status: 'pending' });
  // Its request had left (stored as sent) when the process died, nothing came back: billed its prompt, as held.
  const sentEmpty = dead({ status: 'pending', call: { ...call, sent: true } });
  for (const m of [cut, answered, empty, sentEmpty]) await store.collection(messages).insert(m);
  let now = 0;
  const sweeper = chatProcess({ now: () => now });
  expect(await sweeper.sweep()).toBe(0);
  now = 300;
  expect(await sweeper.sweep()).toBe(4);
  expect(await chatProcess({ now: () => (now += 1000) }).sweep()).toBe(0); // nothing left to fail or bill
  expect(await usageOf(cut.id)).toEqual([expect.objectContaining({ inputTokens: 12, outputTokens: 10, estimated: true, callId: cut.id })]);
  expect(await usageOf(answered.id)).toEqual([
    expect.objectContaining({ inputTokens: 15, outputTokens: 3, estimated: false, callId: answered.id, credentialId: 'key_1' }),
  ]);
  expect(await usageOf(empty.id)).toEqual([expect.objectContaining({ inputTokens: 0, outputTokens: 0, callId: empty.id })]);
  expect(await usageOf(sentEmpty.id)).toEqual([
    expect.objectContaining({ inputTokens: 12, outputTokens: 0, estimated: true, callId: sentEmpty.id }),
  ]);
});

it("stores a reply's call as sent before its request reaches the provider", async () => {
  const p = chatProcess({ drainMs: 0 });
  const call = { provider: 'openai', model: 'gpt-fake', keySource: 'tenant', credentialId: '', credentialType: '', promptTokens: 5 };
  const doc = pendingDoc(p, { call });
  await store.collection(messages).insert(doc);
  const before = fake.requests.length;
  fake.script({ type: 'hang' });
  p.start({
    tenantId: 'ten_1',
    message: doc,
    history: [{ role: 'user', content: 'talk' }],
    llm: { settings: { provider: 'openai', baseUrl: fake.url, apiKey: API_KEY, model: 'gpt-fake' }, keySource: 'tenant' },
  });
  while (fake.requests.length === before) await new Promise((r) => setTimeout(r, 10));
  // The provider has the request (and may charge for it): the record already says so, for a sweep after a crash.
  expect((await store.collection(messages).get(doc.id))?.call).toEqual({ ...call, sent: true });
});

it("stores the provider's usage with the reply as soon as it arrives, before the reply ends", async () => {
  const p = chatProcess({ flushMs: 5000 });
  const doc = pendingDoc(p);
  await store.collection(messages).insert(doc);
  fake.script({ type: 'text', text: 'one two', delayMs: 10, usage: { inputTokens: 9, outputTokens: 2 } });
  const flush = jest.spyOn(p, 'flush');
  p.start({
    tenantId: 'ten_1',
    message: doc,
    history: [{ role: 'user', content: 'talk' }],
    llm: { settings: { provider: 'openai', baseUrl: fake.url, apiKey: API_KEY, model: 'gpt-fake' }, keySource: 'tenant' },
  });
  while (p.size > 0) await new Promise((r) => setTimeout(r, 10));
  // The flusher ticks every 5 s: the write before the final one was the usage's own.
  expect(flush).toHaveBeenCalled();
  expect(await store.collection(messages).get(doc.id)).toMatchObject({ status: 'completed', inputTokens: 9, outputTokens: 2 });
});

it("an embeddings call's record is beaten while the provider takes longer than a lease, then deleted and billed once", async () => {
  // The provider answers after more than two leases: another process's sweep would fail (and bill) a record not beaten.
  const slow: LlmTransport = async (url, init) => {
    await new Promise((r) => setTimeout(r, 700));
    return sendHttp(url, init);
  };
  const a = new Replies(store, relay, logger, slow, { flushMs: 50, leaseMs: 300, drainMs: 5000 });
  processes.push(a);
  const b = chatProcess();
  const record: MessageDoc = {
    id: newId('msg'),
    tenantId: 'ten_1',
    sessionId: '',
    role: 'assistant',
    content: '',
    projectId: '',
    status: 'pending',
    seq: nextSeq(),
    errorCode: null,
    errorMessage: null,
    inputTokens: null,
    outputTokens: null,
    ...a.newLease(),
    createdAt: nowIso(),
    completedAt: null,
    ephemeral: true,
    embeddings: true,
    call: { provider: 'openai', model: 'text-embed', keySource: 'tenant', credentialId: '', credentialType: '', promptTokens: 99 },
  };
  await store.collection(messages).insert(record);
  const settings = { provider: 'openai' as const, baseUrl: fake.url, apiKey: API_KEY, model: 'text-embed' };
  const plan = planCall('text-embed', [], [settings], { creditsPerUsd: 1000, creditsPer1kTokens: 1 });
  const done = a.embed('ten_1', record, plan, { input: ['one two'] });
  await sweepWhileRunning(b, a, 50);
  const { result } = await done;
  expect(result.vectors).toEqual([fakeEmbedding('one two')]);
  expect(await store.collection(messages).get(record.id)).toBeNull();
  // Billed once, by its generator, the provider's count (not the sweep's 99 reserved).
  expect((await usageOf(record.id)).map((u) => u.inputTokens)).toEqual([result.inputTokens]);
});
