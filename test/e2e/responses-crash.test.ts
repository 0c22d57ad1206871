import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, createKey, eventually, signUp } from '../helpers/http';
import { startSystem, type SystemProcess } from '../helpers/process';
import { freePort } from '../helpers/redis';

// The system as `npm start` runs it with one process per service. A streamed response of the OpenAI-compatible API
// is dropped by its client at event 10, then the chat service generating it is SIGKILLed. Resumed with
// starting_after=10, the stream sends 11..N with no gap and no duplicate: the chunks stored before the kill, then
// response.failed (the reply was interrupted), never response.completed. A chat completion and an embeddings call
// with an Idempotency-Key, cut the same way, are retried with their keys: the provider is not called again; a keyed
// response whose gateway was SIGKILLed ends in chat, and its retry gets it replayed.
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
