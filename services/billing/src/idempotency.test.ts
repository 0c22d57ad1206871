import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import {
  AppError,
  idempotency,
  LeaseWatch,
  newId,
  openEmbeddedBus,
  openSqliteStore,
  OutboxRelay,
  sha256Hex,
  type EventBus,
  type Store,
} from '@svc/kit';
import type { billingV1 } from '@svc/proto';
import { accounts, ALL_COLLECTIONS, invoices, ledger } from './collections';
import { callAs } from '../test/fixtures/call';
import { billingHandlers } from './handlers';
import { idempotent, type Commit } from './idempotency';
import { addEntry, applyOnce } from './ledger';
import { sandboxProvider } from './providers/sandbox';

// Idempotency-Key on a real SQLite store: a crash of the billing process at either side of the work's commit, a
// holder whose wall clock is behind, and a take-over judged on the observer's own clock. Charged once in each.
jest.setTimeout(90_000);

const repoRoot = resolve(__dirname, '../../..');
let dir: string;
let store: Store;
let bus: EventBus;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'billing-idem-'));
  store = await openSqliteStore({ path: join(dir, 'billing.db') });
  for (const c of ALL_COLLECTIONS) await store.ensure(c as Parameters<Store['ensure']>[0]);
  bus = openEmbeddedBus({ path: join(dir, 'bus.db') });
  // The tenant's starting grant.
  await applyOnce(store, (tx) =>
    addEntry(tx, { tenantId: 'ten_a', sourceKey: 'grant:ten_a', kind: 'grant', credits: 1000, description: 'g' }),
  );
});
afterEach(async () => {
  jest.restoreAllMocks();
  await bus.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

/** One billing replica over the test's store (`over` wraps it, e.g. to hold a transaction back). */
const replica = (over: Store = store) =>
  billingHandlers({
    store: over,
    relay: new OutboxRelay(store, bus),
    adminToken: undefined,
    provider: sandboxProvider('http://127.0.0.1'),
    creditPriceCents: 1,
    startingGrant: 0,
  });

const purchase = (handlers: ReturnType<typeof replica>, key: string, credits = 50) =>
  handlers.purchaseCredits({ credits, idempotencyKey: key }, callAs('ten_a'));

/** What the tenant was charged: balance, paid invoices and purchase entries. */
async function charged() {
  const balance = (await store.collection(accounts).get('ten_a'))?.balance;
  const paid = (await store.collection(invoices).find({ tenantId: 'ten_a' }, { limit: 100 })).items;
  const entries = (await store.collection(ledger).find({ tenantId: 'ten_a' }, { limit: 100 })).items;
  return { balance, invoices: paid.map((i) => i.id), purchases: entries.filter((e) => e.kind === 'purchase').length };
}

/** Runs the purchase in its own process, which SIGKILLs itself at `point` of the work's transaction. */
async function crashedPurchase(key: string, point: 'before-commit' | 'after-commit'): Promise<void> {
  const fixture = join(__dirname, '../test/fixtures', 'crash-purchase.ts');
  const args = [join(dir, 'billing.db'), join(dir, 'bus.db'), 'ten_a', key, '50', point];
  const child = spawn(process.execPath, ['--import', 'tsx', fixture, ...args], { cwd: repoRoot, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  // 'exit' comes once the process is reaped: its pid is then gone from this host.
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((done) => child.on('exit', (c, s) => done([c, s])));
  if (signal !== 'SIGKILL') throw new Error(`the fixture did not crash (exit ${code}):\n${stderr}`);
}

/** The same request again, as a client retries it: again while it is answered "still in progress". */
async function retry(handlers: ReturnType<typeof replica>, key: string) {
  const started = Date.now();
  for (;;) {
    try {
      return await purchase(handlers, key);
    } catch (err) {
      if (!(err instanceof AppError && err.details?.reason === 'idempotency_key_in_progress') || Date.now() - started > 60_000) throw err;
    }
  }
}

describe('a crash of the billing process', () => {
  it('after the work committed and before the answer: the same key answers that purchase, charged once', async () => {
    await crashedPurchase('buy-1', 'after-commit');
    const handlers = replica();
    const answer = await retry(handlers, 'buy-1');
    const after = await charged();
    expect(after).toMatchObject({ balance: 1050, purchases: 1 });
    expect(after.invoices).toEqual([answer.payment!.invoice!.id]);
    expect(answer.payment).toMatchObject({ status: 'succeeded', creditsAdded: 50, balance: 1050 });
    // And again: the same answer.
    expect(await purchase(handlers, 'buy-1')).toEqual(answer);
    expect(await charged()).toEqual(after);
  });

  it('before the work committed: the same key is taken over at once (its holder is gone) and charged once', async () => {
    await crashedPurchase('buy-2', 'before-commit');
    expect(await charged()).toMatchObject({ balance: 1000, purchases: 0 });
    const started = Date.now();
    const answer = await purchase(replica(), 'buy-2'); // no "in progress": the holder's process is gone
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(answer.payment).toMatchObject({ creditsAdded: 50, balance: 1050 });
    expect(await charged()).toMatchObject({ balance: 1050, purchases: 1 });
  });
});

/** A store whose transactions wait until `release` is called: a holder slow inside its work. */
function heldBack(): { store: Store; entered: Promise<void>; release: () => void } {
  let release!: () => void;
  let entered!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const reached = new Promise<void>((r) => (entered = r));
  const wrapped = new Proxy(store, {
    get(target, prop) {
      if (prop === 'transaction')
        return async (fn: Parameters<Store['transaction']>[0]) => {
          entered();
          await gate;
          return target.transaction(fn);
        };
      const value = Reflect.get(target, prop) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { store: wrapped, entered: reached, release };
}

it('a live holder whose wall clock is an hour behind keeps its claim: the other replica waits for its answer', async () => {
  const slow = heldBack();
  const realNow = Date.now.bind(Date);
  // Replica A's clock is an hour behind while it claims the key.
  const skew = jest.spyOn(Date, 'now').mockImplementation(() => realNow() - 3600_000);
  const first = purchase(replica(slow.store), 'buy-3');
  await slow.entered;
  skew.mockRestore();
  // Replica B (a correct clock) gets the same request while A is still working.
  const second = purchase(replica(), 'buy-3');
  await new Promise((r) => setTimeout(r, 500));
  slow.release();
  const [a, b] = await Promise.all([first, second]);
  expect(b).toEqual(a);
  expect(await charged()).toMatchObject({ balance: 1050, purchases: 1 });
});

describe('a claim whose holder is on another host', () => {
  const id = sha256Hex('ten_a|purchase|buy-4');
  const body = { credits: 50 };
  // Each run of the work is a new invoice, so a new ledger source: only the claim keeps it from applying twice.
  const work = (commit: Commit<billingV1.PurchaseCreditsResponse>) =>
    commit(async (tx) => {
      const sourceKey = `purchase:${newId('inv')}`;
      const applied = await addEntry(tx, { tenantId: 'ten_a', sourceKey, kind: 'purchase', credits: 50, description: 'p' });
      return { payment: { creditsAdded: 50, balance: applied!.balance } as billingV1.Payment };
    });

  beforeEach(async () => {
    // Claimed by a process on another machine, which then stopped beating it.
    await store.collection(idempotency).insert({
      id,
      tenantId: 'ten_a',
      operation: 'purchase',
      bodyHash: sha256Hex(JSON.stringify(body)),
      status: 'pending',
      holder: 'other-host/4242/abc',
      gen: 1,
      beat: 7,
      response: null,
      createdAt: new Date().toISOString(),
      expiresAt: Date.now() + 3600_000,
    });
  });

  it('is taken over only after its beat stood still for the lease on the observer’s clock', async () => {
    let observed = 0;
    const watch = new LeaseWatch(() => observed);
    const scope = { tenantId: 'ten_a', operation: 'purchase', key: 'buy-4', body };
    const options = { watch, timings: { leaseMs: 30_000, waitMs: 200 } };
    await expect(idempotent(store, scope, work, options)).rejects.toMatchObject({ details: { reason: 'idempotency_key_in_progress' } });
    observed += 29_000;
    await expect(idempotent(store, scope, work, options)).rejects.toMatchObject({ details: { reason: 'idempotency_key_in_progress' } });
    expect(await charged()).toMatchObject({ balance: 1000, purchases: 0 });
    observed += 1_000;
    expect(await idempotent(store, scope, work, options)).toMatchObject({ payment: { balance: 1050 } });
    expect(await store.collection(idempotency).get(id)).toMatchObject({ status: 'done', gen: 2 });
  });

  it('a holder that lost its claim to a take-over commits nothing and answers what the new holder did', async () => {
    await store.collection(idempotency).delete(id);
    const scope = { tenantId: 'ten_a', operation: 'purchase', key: 'buy-4', body };
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    // A claims and stalls before its commit (a long pause: it cannot beat).
    const a = idempotent<billingV1.PurchaseCreditsResponse>(
      store,
      scope,
      async (commit) => {
        await gate;
        return work(commit);
      },
      { timings: { beatMs: 3600_000 } },
    );
    await new Promise((r) => setTimeout(r, 100));
    // B judges the claim abandoned (its clock moves 20 s a look) and takes it over.
    let observed = 0;
    const b = await idempotent<billingV1.PurchaseCreditsResponse>(store, scope, work, {
      watch: new LeaseWatch(() => (observed += 20_000)),
    });
    release();
    expect(await a).toEqual(b);
    expect(await charged()).toMatchObject({ balance: 1050, purchases: 1 });
  });
});
