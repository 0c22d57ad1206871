import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

/** One request as a webhook receiver saw it. */
export interface Received {
  path: string;
  headers: IncomingMessage['headers'];
  body: string;
  json: any;
  receivedAt: number;
}

/** What to answer: a status (and body), or `hold` to keep the request open until the receiver closes. */
export type Answer = { status: number; body?: string; delayMs?: number } | 'hold';

export interface Receiver {
  url: string;
  port: number;
  requests: Received[];
  /** Requests to one path. */
  at(path: string): Received[];
  /** Decides the answer per request; default 200 "ok". */
  answer: (req: Received) => Answer;
  close(): Promise<void>;
}

/**
 * A real webhook receiver on 127.0.0.1 (a fake of a third party, speaking plain HTTP). Requests are recorded with
 * their raw body, so tests verify the signature themselves.
 */
export async function startReceiver(port = 0): Promise<Receiver> {
  const held: ServerResponse[] = [];
  const receiver: Receiver = {
    url: '',
    port: 0,
    requests: [],
    at: (path) => receiver.requests.filter((r) => r.path === path),
    answer: () => ({ status: 200, body: 'ok' }),
    close: () =>
      new Promise((ok) => {
        for (const res of held) res.destroy();
        server.closeAllConnections();
        server.close(() => ok());
      }),
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      let json: unknown;
      try {
        json = JSON.parse(body);
      } catch {
        json = undefined;
      }
      const r: Received = { path: req.url ?? '/', headers: req.headers, body, json, receivedAt: Date.now() };
      receiver.requests.push(r);
      const answer = receiver.answer(r);
      if (answer === 'hold') held.push(res);
      else {
        const send = () => res.writeHead(answer.status, { 'content-type': 'text/plain' }).end(answer.body ?? '');
        if (answer.delayMs) setTimeout(send, answer.delayMs);
        else send();
      }
    });
  });
  await new Promise<void>((ok) => server.listen(port, '127.0.0.1', ok));
  receiver.port = (server.address() as AddressInfo).port;
  receiver.url = `http://127.0.0.1:${receiver.port}`;
  return receiver;
}

/** The signature check a receiver would write by hand: HMAC-SHA256 over `id.timestamp.body` with the secret's UTF-8 bytes. */
export function verifyByHand(r: Received, secret: string): boolean {
  const id = String(r.headers['webhook-id']);
  const ts = String(r.headers['webhook-timestamp']);
  const expected = createHmac('sha256', Buffer.from(secret, 'utf8')).update(`${id}.${ts}.${r.body}`).digest();
  return String(r.headers['webhook-signature'])
    .split(' ')
    .some((sig) => {
      const [version, value] = sig.split(',');
      const got = Buffer.from(value ?? '', 'base64');
      return version === 'v1' && got.length === expected.length && timingSafeEqual(got, expected);
    });
}

/** The same check with the `standardwebhooks` package, keyed with the secret's UTF-8 bytes; throws when it fails. */
export function verifyWithStandardWebhooks(r: Received, secret: string): unknown {
  const wh = new Webhook(new TextEncoder().encode(secret), { format: 'raw' });
  return wh.verify(r.body, {
    'webhook-id': String(r.headers['webhook-id']),
    'webhook-timestamp': String(r.headers['webhook-timestamp']),
    'webhook-signature': String(r.headers['webhook-signature']),
  });
}
