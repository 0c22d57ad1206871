import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { echoText, startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, createKey, eventually, signUp } from '../helpers/http';
import { startSystem, type SystemProcess } from '../helpers/process';
import { joinedDeltas, readSse } from '../helpers/sse';

// The system as `npm start` runs it, killed with SIGKILL (every process) while a chat reply streams. After the
// restart the reply is failed with a reason (never left `streaming`), keeps the text stored before the kill, and
// the session goes on. The tenant's API key reaches the provider and appears in no log line. Chunks of every reply
// streaming in a chat process are stored together (group commit): several streamed responses cut by the SIGKILL of
// every process each resume after the restart with no gap and no duplicate.
jest.setTimeout(120_000);

const API_KEY = 'sk-chat-crash-' + 'c'.repeat(40);
let dataDir: string;
let fake: FakeProviderServer;
let system: SystemProcess | null = null;
let logs = '';

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'svc-chat-crash-'));
  fake = await startFakeOpenAI({ apiKey: API_KEY });
});
afterAll(async () => {
  if (system) await system.kill().catch(() => undefined);
  await fake.close();
  rmSync(dataDir, { recursive: true, force: true });
});

const env = () => ({
  DATA_DIR: dataDir,
  EGRESS_ALLOW_PRIVATE: 'true',
  LOG_LEVEL: 'trace',
  CHAT_REPLY_LEASE_MS: '1000',
  CHAT_FLUSH_MS: '50',
});

it('a reply cut by SIGKILL of every process is failed with a reason after restart; the key is in no log line', async () => {
  system = await startSystem(env());
  let api = client(system.url);
  const owner = await signUp(api, 'ChatCrash');
  const token = owner.accessToken;
  await api.patch('/api/v1/tenant/settings/llm', { provider: 'openai', model: 'gpt-fake', baseUrl: fake.url, apiKey: API_KEY }, { token });
  const session = (await api.post('/api/v1/chat/sessions', { title: 'crash' }, { token })).body.data.id;

  // A long, slow reply: killed somewhere in the middle.
  const text = Array.from({ length: 200 }, (_, i) => `w${i}`).join(' ');
  fake.script({ type: 'text', text, delayMs: 50 });
  const posted = (await api.post(`/api/v1/chat/sessions/${session}/messages`, { content: 'talk slowly' }, { token })).body.data;
  const url = `${system.url}/api/v1/chat/sessions/${session}/stream`;
  const partial = await readSse(url, { token, stopAfter: (events) => events.filter((e) => e.event === 'message.delta').length >= 5 });
  const reply = async () =>
    (await api.get(`/api/v1/chat/sessions/${session}/messages`, { token })).body.data.find(
      (m: { id: string }) => m.id === posted.responseMessageId,
    );
  // The text so far reaches the store while the reply streams.
  await eventually(async () => (await reply()).content.length >= joinedDeltas(partial.events).length);
  expect((await reply()).status).toBe('streaming');

  await system.kill();
  logs += system.output();
  system = await startSystem(env());
  api = client(system.url);

  let after: any;
  await eventually(async () => (after = await reply()).status !== 'streaming', 20_000);
  expect(after).toMatchObject({ status: 'failed', error: { code: 'REPLY_INTERRUPTED', message: expect.any(String) } });
  expect(after.content.length).toBeGreaterThan(0);
  expect(text.startsWith(after.content)).toBe(true);
  // Its stream replays what was kept, then the error.
  const replay = await readSse(`${system.url}/api/v1/chat/sessions/${session}/stream`, { token });
  expect(joinedDeltas(replay.events)).toBe(after.content);
  expect(replay.events[replay.events.length - 1]).toMatchObject({ event: 'error', data: { code: 'REPLY_INTERRUPTED' } });

  // The session goes on.
  const next = (await api.post(`/api/v1/chat/sessions/${session}/messages`, { content: 'still there?' }, { token })).body.data;
  const live = await readSse(`${system.url}/api/v1/chat/sessions/${session}/stream`, { token });
  expect(joinedDeltas(live.events)).toBe(echoText('still there?'));
  expect(live.events[live.events.length - 1].data.message.id).toBe(next.responseMessageId);

  await system.kill();
  logs += system.output();
  system = null;
  expect(fake.requests.every((r) => r.headers.authorization === `Bearer ${API_KEY}`)).toBe(true);
  expect(logs).toContain('chat service listening');
  expect(logs).not.toContain(API_KEY);
});

it('streamed responses whose chunks were stored in shared batches resume after SIGKILL of every process: no gap, no duplicate', async () => {
  system = await startSystem(env());
  const api = client(system.url);
  const token = (await signUp(api, 'BatchCrash')).accessToken;
  await api.patch('/api/v1/tenant/settings/llm', { provider: 'openai', model: 'gpt-fake', baseUrl: fake.url, apiKey: API_KEY }, { token });
  const key = (await createKey(api, token)).key;
  const ai = () => new OpenAI({ apiKey: key, baseURL: `${system!.url}/v1`, maxRetries: 0 });

  // Four slow responses at once in the one chat process: their chunks share the batches that store them.
  const texts = [0, 1, 2, 3].map((r) => Array.from({ length: 200 }, (_, i) => `r${r}w${i}`).join(' '));
  for (const text of texts) fake.script({ type: 'text', text, delayMs: 30 });
  const CUT = 8;
  const firsts = await Promise.all(
    texts.map(async (_, r) => {
      const seen: OpenAI.Responses.ResponseStreamEvent[] = [];
      for await (const e of await ai().responses.create({ model: 'gpt-fake', input: `talk slowly ${r}`, stream: true })) {
        seen.push(e);
        if (e.sequence_number === CUT) break;
      }
      return seen;
    }),
  );
  const ids = firsts.map((seen) => (seen[0] as OpenAI.Responses.ResponseCreatedEvent).response.id);
  const deltasOf = (events: OpenAI.Responses.ResponseStreamEvent[]) =>
    events
      .filter((e): e is OpenAI.Responses.ResponseTextDeltaEvent => e.type === 'response.output_text.delta')
      .map((e) => e.delta)
      .join('');
  const storedText = (r: OpenAI.Responses.Response) =>
    ((r.output[0] as OpenAI.Responses.ResponseOutputMessage | undefined)?.content[0] as { text?: string } | undefined)?.text ?? '';
  // Each goes on streaming (and being stored) after its client left: killed once every one stored past its cut.
  await eventually(async () => {
    const stored = await Promise.all(ids.map((id) => ai().responses.retrieve(id)));
    return stored.every((r, i) => storedText(r).length > deltasOf(firsts[i]).length);
  });
  await system.kill();
  logs += system.output();
  system = await startSystem(env());

  for (const [i, id] of ids.entries()) {
    const resumed: OpenAI.Responses.ResponseStreamEvent[] = [];
    await eventually(async () => {
      resumed.length = 0;
      try {
        for await (const e of await ai().responses.retrieve(id, { stream: true, starting_after: CUT })) resumed.push(e);
      } catch {
        return false; // the gateway may still be reconnecting to the new chat process
      }
      return resumed.at(-1)?.type === 'response.failed';
    }, 30_000);
    const seqs = resumed.map((e) => e.sequence_number);
    expect(seqs).toEqual(seqs.map((_, j) => CUT + 1 + j));
    expect(resumed.map((e) => e.type)).not.toContain('response.completed');
    const whole = deltasOf(firsts[i]) + deltasOf(resumed);
    expect(whole.length).toBeGreaterThan(deltasOf(firsts[i]).length);
    // The four were started at once: the provider answered each with the text whose first word it begins with.
    const text = texts.find((t) => t.startsWith(whole.split(' ')[0] + ' '));
    expect(text?.startsWith(whole)).toBe(true);
    const stored = await ai().responses.retrieve(id);
    expect(stored.status).toBe('failed');
    expect(storedText(stored)).toBe(whole);
  }
  await system.kill();
  logs += system.output();
  system = null;
});
