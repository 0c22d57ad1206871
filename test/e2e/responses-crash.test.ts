import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, createKey, eventually, signUp } from '../helpers/http';
import { startSystem, type SystemProcess } from '../helpers/process';
import { freePort } from '../helpers/redis';
import { joinedDeltas, readSse, type SseEvent, type SseResult } from '../helpers/sse';

// The system as `npm start` runs it with one process per service. A streamed response of the OpenAI-compatible API
// is dropped by its client at event 10, then the chat service generating it is SIGKILLed. Resumed with
// starting_after=10, the stream sends 11..N with no gap and no duplicate: the chunks stored before the kill, then
// response.failed (the reply was interrupted), never response.completed. A chat completion and an embeddings call
// with an Idempotency-Key, cut the same way, are retried with their keys: the provider is not called again; a keyed
// response whose gateway was SIGKILLed ends in chat, and its retry gets it replayed. REST chat replies streaming at once
// (their chunks stored in shared group-committed batches), followed live when chat is SIGKILLed: each, read again from
// the start and resumed from the last id its reader saw, runs on with no gap and no duplicate, and is billed once.
jest.setTimeout(120_000);

let dataDir: string;
let fake: FakeProviderServer;
let system: SystemProcess | null = null;

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'svc-responses-crash-'));
  fake = await startFakeOpenAI();
});
afterAll(async () => {
  if (system) await system.kill().catch(() => undefined);
  await fake.close();
  rmSync(dataDir, { recursive: true, force: true });
});

it('resumes a response stream after its client left and the chat service was SIGKILLed: no gap, no duplicate', async () => {
  system = await startSystem({
    DATA_DIR: dataDir,
    EGRESS_ALLOW_PRIVATE: 'true',
    SVC_LAYOUT: 'per-service',
    // A fixed port: the gateway restarted after its SIGKILL (below) listens where it did.
    PORT: String(await freePort()),
    CHAT_REPLY_LEASE_MS: '1000',
    CHAT_FLUSH_MS: '50',
  });
  const api = client(system.url);
  const owner = await signUp(api, 'ResponsesCrash');
  const token = owner.accessToken;
  await api.patch('/api/v1/tenant/settings/llm', { provider: 'openai', model: 'gpt-fake', baseUrl: fake.url, apiKey: 'sk-x' }, { token });
  const ai = new OpenAI({ apiKey: (await createKey(api, token)).key, baseURL: `${system.url}/v1`, maxRetries: 0 });

  const text = Array.from({ length: 200 }, (_, i) => `w${i}`).join(' ');
  fake.script({ type: 'text', text, delayMs: 50 });
  const first: OpenAI.Responses.ResponseStreamEvent[] = [];
  let id = '';
  for await (const e of await ai.responses.create({ model: 'gpt-fake', input: 'talk slowly', stream: true })) {
    first.push(e);
    if (e.type === 'response.created') id = e.response.id;
    if (e.sequence_number === 10) break;
  }
  expect(first.map((e) => e.sequence_number)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);

  // A few more chunks are generated (and stored) after the client left, then the chat service dies.
  await new Promise((r) => setTimeout(r, 300));
  const pid = await system.killService('chat');
  await system.restarted('chat', pid);

  const resumed: OpenAI.Responses.ResponseStreamEvent[] = [];
  await eventually(async () => {
    resumed.length = 0;
    try {
      for await (const e of await ai.responses.retrieve(id, { stream: true, starting_after: 10 })) resumed.push(e);
      return true;
    } catch {
      return false; // the gateway may still be reconnecting to the new chat process
    }
  }, 30_000);
  const seqs = resumed.map((e) => e.sequence_number);
  expect(seqs).toEqual(seqs.map((_, i) => 11 + i));
  const last = resumed.at(-1) as OpenAI.Responses.ResponseFailedEvent;
  expect(last.type).toBe('response.failed');
  expect(last.response.error).toMatchObject({ code: 'reply_interrupted' });
  expect(resumed.map((e) => e.type)).not.toContain('response.completed');
  const deltas = [...first, ...resumed]
    .filter((e): e is OpenAI.Responses.ResponseTextDeltaEvent => e.type === 'response.output_text.delta')
    .map((e) => e.delta)
    .join('');
  expect(deltas.length).toBeGreaterThan(0);
  expect(text.startsWith(deltas)).toBe(true);
  // What the client saw before it left is all there: the stored text is at least that long.
  const stored = await ai.responses.retrieve(id);
  expect(stored.status).toBe('failed');
  expect((stored.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0]).toMatchObject({ text: deltas });
});

it('a /v1 call with an Idempotency-Key cut by SIGKILL (of chat, then of the gateway) is not made again by its retries', async () => {
  // The system the test above left running (its chat process restarted once).
  const api = client(system!.url);
  const token = (await signUp(api, 'KeyedCrash')).accessToken;
  await api.patch('/api/v1/tenant/settings/llm', { provider: 'openai', model: 'gpt-fake', baseUrl: fake.url, apiKey: 'sk-x' }, { token });
  const key = (await createKey(api, token)).key;
  const post = (path: string, body: object, idemKey: string) =>
    api.post(path, body, { token: key, headers: { 'idempotency-key': idemKey } });
  const complete = () =>
    post('/v1/chat/completions', { model: 'gpt-fake', messages: [{ role: 'user', content: 'keyed-crash' }] }, 'crash-1');
  const embed = () => post('/v1/embeddings', { model: 'gpt-fake', input: 'keyed-embed' }, 'crash-2');
  const asked = (word: string) => fake.requests.filter((r) => JSON.stringify(r.body ?? '').includes(word)).length;

  // The provider answers the completion in full but holds back its end; it never answers the embeddings.
  fake.script({ type: 'text', text: 'answered in full', holdEndMs: 60_000 });
  fake.script({ type: 'hang' });
  const completion = complete();
  await eventually(async () => asked('keyed-crash') === 1);
  const embedding = embed();
  await eventually(async () => asked('keyed-embed') === 1);
  const pid = await system!.killService('chat');
  expect([(await completion).status, (await embedding).status]).toEqual([503, 503]);
  await system!.restarted('chat', pid);

  // Retried with their keys: in progress (409) until the restarted chat service fails the cut reply, or a 503 while
  // the gateway reconnects; then the interruption, every time. The provider is never asked again.
  for (const retry of [complete, embed]) {
    const seen = new Set<number>();
    let last: Awaited<ReturnType<typeof retry>>;
    await eventually(async () => {
      last = await retry();
      seen.add(last.status);
      return last.body?.error?.code === 'reply_interrupted';
    }, 30_000);
    expect([...seen].every((s) => s === 409 || s === 503)).toBe(true);
    expect([last!.status, (await retry()).body.error.code]).toEqual([503, 'reply_interrupted']);
  }
  expect([asked('keyed-crash'), asked('keyed-embed')]).toEqual([1, 1]);

  // The gateway dies instead, while a keyed response is answered: the response goes on in chat and ends there. The
  // retry, through the restarted gateway, gets that response replayed by chat; the provider was asked once.
  fake.script({ type: 'text', text: 'answered once', holdEndMs: 1500 });
  const respond = () => post('/v1/responses', { model: 'gpt-fake', input: 'keyed-gateway' }, 'crash-3');
  const cut = respond().catch(() => null); // its connection dies with the gateway
  await eventually(async () => asked('keyed-gateway') === 1);
  const gateway = await system!.killService('gateway');
  await cut;
  await system!.restarted('gateway', gateway);
  let replayed: Awaited<ReturnType<typeof respond>> | null = null;
  await eventually(async () => (replayed = await respond().catch(() => null))?.status === 200, 30_000);
  expect(replayed!.body).toMatchObject({ status: 'completed', output: [{ content: [{ text: 'answered once' }] }] });
  expect((await api.get(`/v1/responses/${replayed!.body.id}`, { token: key })).body.status).toBe('completed');
  expect(asked('keyed-gateway')).toBe(1);
});

/**
 * A REST chat stream's deltas, `from` the text offset it resumed at: each id is `<reply>:<offset>` and each delta
 * starts where the one before ended (no gap, no duplicate, ids strictly increasing). Returns the offset reached.
 */
function expectContinuous(events: SseEvent[], replyId: string, from: number): number {
  let offset = from;
  for (const e of events.filter((x) => x.event === 'message.delta')) {
    expect(e.data.delta.length).toBeGreaterThan(0);
    offset += e.data.delta.length;
    expect(e.id).toBe(`${replyId}:${offset}`);
  }
  return offset;
}

it('REST chat replies sharing group-committed batches, followed live when chat is SIGKILLed, resume with no gap and no duplicate', async () => {
  // The system the tests above left running.
  const api = client(system!.url);
  const token = (await signUp(api, 'BatchedRepliesCrash')).accessToken;
  await api.patch('/api/v1/tenant/settings/llm', { provider: 'openai', model: 'gpt-fake', baseUrl: fake.url, apiKey: 'sk-x' }, { token });
  const balance = async () => (await api.get('/api/v1/billing/summary', { token })).body.data.credits;
  const before = (await balance()).balance;

  // Four slow replies at once in the one chat process: their chunks share the batches that store them.
  const texts = [0, 1, 2, 3].map((r) => Array.from({ length: 200 }, (_, i) => `r${r}w${i}`).join(' '));
  for (const text of texts) fake.script({ type: 'text', text, delayMs: 30 });
  const sessions: string[] = await Promise.all(
    texts.map(async () => (await api.post('/api/v1/chat/sessions', {}, { token })).body.data.id),
  );
  const posted = await Promise.all(
    sessions.map((s, r) => api.post(`/api/v1/chat/sessions/${s}/messages`, { content: `talk slowly ${r}` }, { token })),
  );
  expect(posted.map((p) => p.status)).toEqual([202, 202, 202, 202]);
  const replyIds: string[] = posted.map((p) => p.body.data.responseMessageId);
  const url = (session: string) => `${system!.url}/api/v1/chat/sessions/${session}/stream`;
  const deltas = (events: SseEvent[]) => events.filter((e) => e.event === 'message.delta');

  // Each followed live: chat dies once every reader has sent a few deltas; its stream ends with an error event.
  const following: Array<Promise<void>> = [];
  const readers = sessions.map((session) => {
    let sent!: () => void;
    following.push(new Promise<void>((resolve) => (sent = resolve)));
    return readSse(url(session), { token, stopAfter: (events) => (deltas(events).length >= 5 && sent(), false) });
  });
  await Promise.all(following);
  const pid = await system!.killService('chat');
  const live = await Promise.all(readers);
  await system!.restarted('chat', pid);

  for (const [r, session] of sessions.entries()) {
    const replyId = replyIds[r];
    expect(live[r].events.at(-1)).toMatchObject({ event: 'error' });
    const seen = expectContinuous(live[r].events, replyId, 0);
    // Read again from the start, once the restarted chat service has failed the cut reply.
    let whole!: SseResult;
    await eventually(async () => {
      whole = await readSse(url(session), { token }).catch(() => whole);
      return whole?.events.at(-1)?.data?.code === 'REPLY_INTERRUPTED';
    }, 30_000);
    const stored = (await api.get(`/api/v1/chat/sessions/${session}/messages`, { token })).body.data.find(
      (m: { id: string }) => m.id === replyId,
    );
    expect(stored).toMatchObject({ status: 'failed', error: { code: 'REPLY_INTERRUPTED' } });
    const end = stored.content.length;
    expect(expectContinuous(whole.events, replyId, 0)).toBe(end);
    expect(whole.events.at(-1)!.id).toBe(`${replyId}:${end}:end`);
    expect(joinedDeltas(whole.events)).toBe(stored.content);
    // Resumed from the last id its reader saw before the kill: what it was sent is kept, and the rest follows it.
    const resumed = await readSse(url(session), { token, headers: { 'last-event-id': deltas(live[r].events).at(-1)!.id! } });
    expect(expectContinuous(resumed.events, replyId, seen)).toBe(end);
    expect(resumed.events.at(-1)).toMatchObject({ event: 'error', id: `${replyId}:${end}:end`, data: { code: 'REPLY_INTERRUPTED' } });
    expect(joinedDeltas(live[r].events) + joinedDeltas(resumed.events)).toBe(stored.content);
    // The four started at once: the provider answered each with the text whose first word it begins with.
    expect(texts.find((t) => t.startsWith(stored.content.split(' ')[0] + ' '))?.startsWith(stored.content)).toBe(true);
  }

  // Each billed once: one request-log entry per reply (its cut call), and the balance fell by their credits alone.
  let log: Array<{ requestId: string; status: string; errorCode: string; credits: number }> = [];
  await eventually(async () => {
    log = (await api.get('/api/v1/requests?source=chat&limit=100', { token })).body.data;
    return log.length >= 4 && (await balance()).reserved === 0;
  }, 30_000);
  expect(log.map((e) => e.requestId).sort()).toEqual(posted.map((p) => p.headers.get('x-request-id')).sort());
  expect(log.map((e) => [e.status, e.errorCode])).toEqual(Array(4).fill(['error', 'REPLY_INTERRUPTED']));
  expect(before - (await balance()).balance).toBe(log.reduce((n, e) => n + e.credits, 0));
});
