import { createServer, type Server, type Socket } from 'node:net';
import { reservablePort } from '@svc/kit/ports';
import type { MessageDoc } from './collections';
import { OwnerRelay } from './owner-relay';

// The relay's ways of giving up, each leaving the reader to the store where it was: an owner that takes the connection
// and says nothing (as a deleted pod's address may), and one that is not there at all. The relay itself, live, is
// tested through two chat processes in test/http/chat.test.ts.
let silent: Server;
const sockets = new Set<Socket>();
let silentAddr: string;

beforeAll(async () => {
  silent = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  silentAddr = `127.0.0.1:${(silent.address() as { port: number }).port}`;
});
afterAll(async () => {
  for (const s of sockets) s.destroy();
  await new Promise((resolve) => silent.close(resolve));
});

const reply = (owner?: string) => ({ id: 'msg_1', sessionId: 'chs_1', ...(owner ? { owner } : {}) }) as MessageDoc;

it('relays only replies another process owns', () => {
  const relay = new OwnerRelay('127.0.0.1:1');
  expect(relay.owns(reply())).toBe(false);
  expect(relay.owns(reply('127.0.0.1:1'))).toBe(false);
  expect(relay.owns(reply('127.0.0.1:2'))).toBe(true);
  relay.close();
});

it('gives up on an owner that takes the connection and never answers, where the reader was', async () => {
  const relay = new OwnerRelay('127.0.0.1:1');
  const sent: unknown[] = [];
  const at = await relay.relay(reply(silentAddr), 5, 'token', async (m) => void sent.push(m), new AbortController().signal);
  expect(at).toEqual({ offset: 5, final: false });
  expect(sent).toEqual([]);
  const chunks = await relay.relayResponse(
    reply(silentAddr),
    'resp_1',
    3,
    'token',
    async (m) => void sent.push(m),
    new AbortController().signal,
  );
  expect(chunks).toEqual({ chunk: 3, final: false });
  expect(sent).toEqual([]);
  relay.close();
});

it('gives up on an owner that is not there, and at once when the reader has gone', async () => {
  const relay = new OwnerRelay('127.0.0.1:1');
  const gone = `127.0.0.1:${await reservablePort()}`;
  expect(await relay.relay(reply(gone), 0, 'token', async () => undefined, new AbortController().signal)).toEqual({
    offset: 0,
    final: false,
  });
  const left = new AbortController();
  const pending = relay.relay(reply(silentAddr), 7, 'token', async () => undefined, left.signal);
  left.abort();
  expect(await pending).toEqual({ offset: 7, final: false });
  relay.close();
});
