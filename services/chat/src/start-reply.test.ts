/**
 * The writes that start and end a reply (startReply, then its generator), on a real store and a fake provider: a
 * reply nothing else can end before its request leaves is stored `sent` by its insert; a response (which another
 * process may cancel meanwhile) is marked sent in a write of its own, in the group commit.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Metadata } from '@grpc/grpc-js';
import { type AuthedContext, capCounters, createLogger, openBus, openSqliteStore, OutboxRelay, type EventBus, type Store } from '@svc/kit';
import type { CallHold } from '@svc/contracts';
import { planCall, sendHttp } from '@svc/llm';
import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { messages, responses, sessionCap, sessions, type MessageDoc, type ResponseDoc } from './collections';
import type { CreditCheck } from './credits';
import { keyReplySlots } from './key-concurrency';
import { holdOf, replyCall } from './model-choice';
import { Replies } from './replies';
import { ReplySlots } from './reply-slots';
import { pendingReply, startReply, type ReplyStarter } from './start-reply';

const API_KEY = 'sk-start-reply-test-' + 's'.repeat(32);
const logger = createLogger('start-reply-test', 'silent');
let dir: string;
let store: Store;
let bus: EventBus;
let relay: OutboxRelay;
let fake: FakeProviderServer;
let replies: Replies;
let deps: ReplyStarter;
/** The holds billing was asked for (the reservation is billing's: here it only records them). */
const held: CallHold[] = [];

beforeAll(async () => {
  fake = await startFakeOpenAI({ apiKey: API_KEY });
});
afterAll(() => fake.close());
beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'chat-start-reply-'));
  store = await openSqliteStore({ path: join(dir, 'chat.db') });
  for (const c of [messages, responses, sessions, capCounters]) await store.ensure(c as Parameters<Store['ensure']>[0]);
  bus = openBus({ clientId: 'test', embeddedPath: join(dir, 'bus.db') });
  relay = new OutboxRelay(store, bus);
  relay.start();
  replies = new Replies(store, relay, logger, sendHttp, { flushMs: 50, leaseMs: 30_000, drainMs: 0 });
  const credits: CreditCheck = { reserve: async (_c, hold) => void held.push(hold), release: async () => undefined };
  deps = {
    store,
    replies,
    credits,
    cap: sessionCap(store, 10),
    keySlots: keyReplySlots(store),
    replySlots: new ReplySlots(store, { replies: 10, followers: 8, followersPerKey: 4 }),
  };
});
afterEach(async () => {
  jest.restoreAllMocks();
  await replies.stop();
  await relay.stop();
  await bus.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const c = {
  auth: { sub: 'usr_1', tid: 'ten_1', typ: 'api_key', role: 'owner', sid: 'key_1', jti: 'j', iat: 0, exp: 0 },
  token: 't',
  requestId: 'req_1',
  clientIp: null,
  metadata: new Metadata(),
} satisfies AuthedContext;

/** A call's pending reply on the fake provider, and what startReply needs to start it (a response's doc if asked). */
function call(asResponse: boolean) {
  const llmSettings = { provider: 'openai' as const, baseUrl: fake.url, apiKey: API_KEY, model: 'gpt-fake' };
  const plan = planCall('gpt-fake', [], [llmSettings], { creditsPerUsd: 1000, creditsPer1kTokens: 1 });
  const reply = pendingReply(c.auth, replies.newLease(), {
    sessionId: '',
    projectId: '',
    ephemeral: true,
    call: replyCall(c, plan, 'tenant', { promptChars: 20, projectId: '', agentId: '', origin: 'v1', requestId: 'req_1', endUser: '' }),
  });
  const resp: ResponseDoc | null = asResponse
    ? {
        id: `resp_${reply.id.slice(4)}`,
        tenantId: 'ten_1',
        messageId: reply.id,
        sessionId: '',
        model: 'gpt-fake',
        background: false,
        store: false,
        previousResponseId: '',
        instructions: '',
        metadata: '',
        echo: '',
        createdAt: new Date().toISOString(),
        expiresAt: new Date(Date.now() + 60_000).toISOString(),
      }
    : null;
  const job = {
    message: reply,
    history: [{ role: 'user' as const, content: 'hello there' }],
    llm: { settings: llmSettings, keySource: 'tenant', plan },
    durable: asResponse,
  };
  return { reply, start: { job, hold: holdOf(reply.id, plan, 20), resp } };
}

async function storedWhenSent(reply: MessageDoc): Promise<MessageDoc | null> {
  const before = fake.requests.length;
  while (fake.requests.length === before) await new Promise((r) => setTimeout(r, 5));
  return store.collection(messages).get(reply.id);
}

it('stores a chat completion `sent` with its insert: its model call costs the insert and the end, no write between', async () => {
  const commits = jest.spyOn(replies.batch, 'commit');
  fake.script({ type: 'hang' });
  const { reply, start } = call(false);
  await startReply(deps, c, start);
  expect(held.map((h) => h.callId)).toContain(reply.id);
  // The record the provider's request finds is the one inserted: marked sent, never updated.
  expect((await storedWhenSent(reply))?.call?.sent).toBe(true);
  expect(commits).toHaveBeenCalledTimes(1); // the insert's: the sent mark (markSent) writes through the group commit too
});

it("marks a response's call sent in a group-committed write of its own, before its request leaves", async () => {
  const commits = jest.spyOn(replies.batch, 'commit');
  fake.script({ type: 'hang' });
  const { reply, start } = call(true);
  await startReply(deps, c, start);
  expect((await storedWhenSent(reply))?.call?.sent).toBe(true);
  expect(commits).toHaveBeenCalledTimes(2); // the insert's, then the sent mark's
});
