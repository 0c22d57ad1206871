/**
 * A local HTTP server speaking the few Stripe endpoints billing uses (customers, Checkout sessions, billing portal
 * sessions), form-encoded as Stripe's API is, with its Idempotency-Key replay. It also plays Stripe's webhook
 * sender: events signed with the endpoint secret exactly as Stripe signs them (the `stripe` package's test header).
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Stripe from 'stripe';

export interface FakeStripe {
  url: string;
  secretKey: string;
  webhookSecret: string;
  /** Requests received, in order (method, path, form fields flattened as Stripe's `a[b]` keys). */
  requests: Array<{ method: string; path: string; form: Record<string, string>; idempotencyKey: string | undefined }>;
  sessions: Map<string, Record<string, unknown>>;
  /** Answer every API call with this HTTP status (a Stripe outage) until set back to null. */
  failWith: number | null;
  /** The signed webhook a Stripe endpoint would receive for this event type and session. */
  signedEvent(type: string, sessionId: string, patch?: Record<string, unknown>): { body: string; signature: string };
  sign(body: string, secret?: string): string;
  close(): Promise<void>;
}

const id = (prefix: string) => `${prefix}_${randomBytes(12).toString('hex')}`;

function readForm(req: IncomingMessage): Promise<Record<string, string>> {
  return new Promise((resolve, reject) => {
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (raw += c));
    req.on('end', () => resolve(Object.fromEntries(new URLSearchParams(raw))));
    req.on('error', reject);
  });
}

/** Stripe's `metadata[k]=v` fields back into an object. */
const metadataOf = (form: Record<string, string>) =>
  Object.fromEntries(
    Object.entries(form)
      .filter(([k]) => k.startsWith('metadata['))
      .map(([k, v]) => [k.slice('metadata['.length, -1), v]),
  );

export async function startFakeStripe(): Promise<FakeStripe> {
  const secretKey = `sk_test_${randomBytes(12).toString('hex')}`;
  const webhookSecret = `whsec_${randomBytes(16).toString('hex')}`;
  const replies = new Map<string, string>();
  const stripe = new Stripe(secretKey);

  const fake: FakeStripe = {
    url: '',
    secretKey,
    webhookSecret,
    requests: [],
    sessions: new Map(),
    failWith: null,
    sign: (body, secret = webhookSecret) => stripe.webhooks.generateTestHeaderString({ payload: body, secret }),
    signedEvent(type, sessionId, patch = {}) {
      const session = { ...fake.sessions.get(sessionId), ...patch };
      const body = JSON.stringify({
        id: id('evt'),
        object: 'event',
        type,
        api_version: '2025-01-27.acacia',
        created: Math.floor(Date.now() / 1000),
        livemode: false,
        data: { object: session },
      });
      return { body, signature: fake.sign(body) };
    },
    close: () => new Promise((r) => server.close(() => r())),
  };

  function answer(path: string, form: Record<string, string>): [number, unknown] {
    const base = { livemode: false, created: Math.floor(Date.now() / 1000) };
    if (path === '/v1/customers') return [200, { id: id('cus'), object: 'customer', metadata: metadataOf(form), ...base }];
    if (path === '/v1/checkout/sessions') {
      const sid = id('cs_test');
      const session = {
        id: sid,
        object: 'checkout.session',
        mode: form.mode,
        customer: form.customer ?? null,
        client_reference_id: form.client_reference_id ?? null,
        metadata: metadataOf(form),
        amount_total: Number(form['line_items[0][price_data][unit_amount]']) * Number(form['line_items[0][quantity]'] ?? 1),
        currency: form['line_items[0][price_data][currency]'],
        payment_status: 'unpaid',
        status: 'open',
        success_url: form.success_url,
        cancel_url: form.cancel_url,
        url: `${fake.url}/c/pay/${sid}`,
        ...base,
      };
      fake.sessions.set(sid, session);
      return [200, session];
    }
    if (path === '/v1/billing_portal/sessions')
      return [
        200,
        {
          id: id('bps'),
          object: 'billing_portal.session',
          customer: form.customer,
          return_url: form.return_url,
          url: `${fake.url}/p/session/${id('ps')}`,
          ...base,
        },
      ];
    return [404, { error: { type: 'invalid_request_error', message: `Unrecognized request URL (POST: ${path})` } }];
  }

  const server: Server = createServer((req, res) => {
    void readForm(req).then((form) => {
      const path = (req.url ?? '').split('?')[0];
      const idempotencyKey = req.headers['idempotency-key'] as string | undefined;
      fake.requests.push({ method: req.method ?? '', path, form, idempotencyKey });
      const send = (status: number, body: string) => {
        res.writeHead(status, { 'content-type': 'application/json', 'request-id': id('req') });
        res.end(body);
      };
      if (req.headers.authorization !== `Bearer ${secretKey}`)
        return send(401, JSON.stringify({ error: { type: 'invalid_request_error', message: 'Invalid API Key provided' } }));
      if (fake.failWith) return send(fake.failWith, JSON.stringify({ error: { type: 'api_error', message: 'Stripe is down' } }));
      const replayKey = idempotencyKey && `${path}|${idempotencyKey}`;
      if (replayKey && replies.has(replayKey)) return send(200, replies.get(replayKey)!);
      const [status, body] = answer(path, form);
      const text = JSON.stringify(body);
      if (replayKey && status === 200) replies.set(replayKey, text);
      send(status, text);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  fake.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return fake;
}
