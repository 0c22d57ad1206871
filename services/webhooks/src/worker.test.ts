/**
 * Delivery claims between two delivery loops on one real SQLite store, posting to a real local receiver. The
 * second loop's clock is injected: what is checked is who sends a delivery, how often, and whose outcome counts.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, newId, nowIso, openSqliteStore, SecretBox, type Store } from '@svc/kit';
import { deliveries, queue, webhooks, type DeliveryDoc } from './collections';
import type * as Fanout from './fanout';
import type * as Worker from './worker';
import type { DeliveryWorker, WorkerOptions } from './worker';

// Loaded afresh for each test: due times are kept increasing per process (nextDueUs), so a test's skewed clock
// would otherwise push the next test's deliveries 30 s into the future.
let enqueue: typeof Fanout.enqueue;
let Loop: typeof Worker.DeliveryWorker;

let dir: string;
let store: Store;
let receiver: Server;
let url: string;
/** How the receiver answers its n-th request (0-based). */
let answer: (n: number, res: ServerResponse) => void;
let received = 0;
/** The `webhook-id` (event id) of each request, in arrival order. */
let sent: string[] = [];
const box = new SecretBox([{ id: 'k1', key: randomBytes(32) }]);
const logger = createLogger('webhooks-worker-test', 'silent');
const loops: DeliveryWorker[] = [];

beforeEach(async () => {
  jest.isolateModules(() => {
    /* eslint-disable @typescript-eslint/no-require-imports -- a fresh module instance needs require */
    enqueue = (require('./fanout') as typeof Fanout).enqueue;
    Loop = (require('./worker') as typeof Worker).DeliveryWorker;
    /* eslint-enable @typescript-eslint/no-require-imports */
  });
  dir = mkdtempSync(join(tmpdir(), 'webhooks-worker-'));
  store = await openSqliteStore({ path: join(dir, 'webhooks.db') });
  await store.ensure(webhooks);
  await store.ensure(deliveries);
  await store.ensure(queue);
  received = 0;
  sent = [];
  receiver = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    sent.push(String(req.headers['webhook-id']));
    answer(received++, res);
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(receiver.address() as { port: number }).port}/hook`;
});
afterEach(async () => {
  jest.restoreAllMocks();
  for (const l of loops.splice(0)) await l.stop(100);
  receiver.closeAllConnections();
  await new Promise((r) => receiver.close(r));
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

async function owedDelivery(): Promise<DeliveryDoc> {
  return (await owedDeliveries(1))[0];
}

/** `count` deliveries owed to one new registration, oldest first. */
async function owedDeliveries(count: number): Promise<DeliveryDoc[]> {
  const hookId = newId('wh');
  const now = nowIso();
  await store.collection(webhooks).insert({
    id: hookId,
    tenantId: 'ten_1',
    url,
    events: ['project.created'],
    secretSealed: box.encrypt('whsec_test'),
    active: true,
    disabledReason: null,
    failingSince: null,
    createdAt: now,
    updatedAt: now,
  });
  const out: DeliveryDoc[] = [];
  for (let i = 0; i < count; i++)
    out.push(
      await store.transaction((tx) =>
        enqueue(tx, {
          tenantId: 'ten_1',
          webhookId: hookId,
          eventId: newId('evt'),
          eventType: 'project.created',
          body: '{}',
          manual: false,
        }),
      ),
    );
  return out;
}

function loop(options: Partial<WorkerOptions> = {}): DeliveryWorker {
  const l = new Loop({
    store,
    box,
    logger,
    policy: { allowPrivate: true },
    scheduleMs: [1500],
    timeoutMs: 3000,
    concurrency: 4,
    tenantConcurrency: 4,
    ...options,
  });
  loops.push(l);
  void l.start();
  return l;
}

async function until(check: () => Promise<boolean> | boolean, what: string): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** Every clock of this process `ms` ahead from now on (what a replica on a machine that far ahead sees). */
function skewWallClock(ms: number): void {
  const real = Date.now.bind(Date);
  jest.spyOn(Date, 'now').mockImplementation(() => real() + ms);
}

const delivery = async (id: string) => (await store.collection(deliveries).get(id))!;

it('a replica whose clock is 30 s ahead does not send a delivery another replica is sending', async () => {
  answer = (_n, res) => setTimeout(() => res.writeHead(200).end('ok'), 1500);
  const d = await owedDelivery();
  loop().wake(d.webhookId);
  await until(() => received === 1, 'the first attempt');
  skewWallClock(30_000);
  loop({ now: () => performance.now() + 30_000 });
  await until(async () => (await delivery(d.id)).status !== 'pending', 'the delivery to end');
  expect(received).toBe(1);
  expect((await delivery(d.id)).attempts.map((a) => a.statusCode)).toEqual([200]);
});

it("a claim taken over under a 30 s clock skew: the old claimer's outcome is refused; the delivery ends once", async () => {
  let releaseFirst: () => void = () => {};
  // The first attempt (the old claimer's) is held, then answered 201: that outcome must never be recorded.
  answer = (n, res) => {
    if (n === 0) releaseFirst = () => res.writeHead(201).end('late');
    else if (n === 1) res.writeHead(503).end('busy');
    else res.writeHead(200).end('ok');
  };
  const d = await owedDelivery();
  loop().wake(d.webhookId);
  await until(() => received === 1, 'the first attempt');
  skewWallClock(30_000);
  // The second replica's clock runs 100 times fast: to it the first claimer looks stopped (paused or cut off).
  const start = performance.now();
  loop({ now: () => 30_000 + (performance.now() - start) * 100 });
  await until(async () => (await delivery(d.id)).attempts.length === 1, 'the take-over attempt to be recorded');
  releaseFirst();
  await until(async () => (await delivery(d.id)).status !== 'pending', 'the delivery to end');
  const done = await delivery(d.id);
  expect(done.status).toBe('succeeded');
  // The taken-over attempt was sent (at least once), but only the new claimer's outcomes count.
  expect(done.attempts.map((a) => a.statusCode)).toEqual([503, 200]);
  expect(received).toBe(3);
  expect(await store.collection(queue).get(d.id)).toBeNull();
});

it('a slow receiver: every claim of a batch beats, so another replica sends none of them again (nor out of order)', async () => {
  // 20 deliveries (one claimed batch) at about 300 ms each, claims of 2 s (timeout + 1 s of grace): the batch lasts
  // three claims. A claim renewed only when its own attempt came up was taken over by the second replica once it
  // had watched it unchanged for a claim, and the rest of the batch sent twice.
  answer = (_n, res) => setTimeout(() => res.writeHead(200).end('ok'), 300);
  const owed = await owedDeliveries(20);
  const webhookId = owed[0].webhookId;
  const claims = { timeoutMs: 1000, claimGraceMs: 1000 };
  loop(claims).wake(webhookId);
  await until(() => received === 1, 'the first attempt');
  const second = loop(claims);
  const nudge = setInterval(() => second.wake(webhookId), 200);
  try {
    for (let i = 0; i < 3000 && (await store.collection(queue).count({ webhookId })) > 0; i++) await new Promise((r) => setTimeout(r, 10));
  } finally {
    clearInterval(nudge);
  }
  expect(await store.collection(queue).count({ webhookId })).toBe(0);
  // Each event POSTed once, in the order the events happened; each attempt recorded.
  expect(sent).toEqual(owed.map((d) => d.eventId));
  for (const d of owed) expect((await delivery(d.id)).attempts.map((a) => a.statusCode)).toEqual([200]);
});
