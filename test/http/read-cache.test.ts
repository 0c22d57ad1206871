import { client, createKey, eventually, signUp, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// GET /tenant and GET /projects/:id are answered from the gateways' caches, which the owners' feeds keep
// (gateway/src/lib/read-cache.ts). Raced here: readers on two gateways, through an API key and an access token,
// while the record changes again and again. No gateway may keep an old value after a change, go back to an old value
// once it showed the new one, or show one tenant's record to another; the gateway that made a write shows it at once.
jest.setTimeout(120_000);

const ADMIN = 'operator-token-for-tests-0123456789';
let stack: Stack;
let gateways: Client[];

beforeAll(async () => {
  // The readers send thousands of requests: no rate limit in their way.
  stack = await startStack({ gateways: 2, env: { SVC_ADMIN_TOKEN: ADMIN, RATE_LIMIT_MAX: '1000000' } });
  gateways = stack.gateways.map((g) => client(g.url));
});
afterAll(() => stack.stop());

interface Read {
  gateway: number;
  start: number;
  end: number;
  value: string;
}

/** One change: the value before and after, when it was asked for, when every gateway showed it, when the next began. */
interface Window {
  value: string;
  previous: string;
  from: number;
  /** The write was acknowledged (through `writer`), when the change is made through a gateway. */
  acked?: { at: number; writer: number };
  settled: number;
  to: number;
}

/**
 * Readers looping over both gateways until `stop`, each answer recorded with its start and end. `read` returns the
 * value shown, or throws to record a failure.
 */
function startReaders(count: number, read: (gateway: number, n: number) => Promise<string>) {
  const reads: Read[] = [];
  const failures: string[] = [];
  let running = true;
  const loops = Array.from({ length: count }, async (_, n) => {
    for (let i = 0; running; i++) {
      const gateway = (n + i) % 2;
      const start = performance.now();
      try {
        const value = await read(gateway, n);
        reads.push({ gateway, start, end: performance.now(), value });
      } catch (err) {
        failures.push((err as Error).message);
      }
    }
  });
  return {
    reads,
    failures,
    async stop() {
      running = false;
      await Promise.allSettled(loops);
    },
  };
}

/** Every gateway shows `value` through every token. */
async function allShow(path: string, tokens: string[], value: (body: any) => string, expected: string): Promise<boolean> {
  for (const g of gateways) for (const token of tokens) if (value((await g.get(path, { token })).body) !== expected) return false;
  return true;
}

/** No reader failed, and the owner's reads (the bystander's are checked as they run) obey every rule. */
function checkRun(readers: { reads: Read[]; failures: string[] }, windows: Window[]): void {
  expect(readers.failures).toEqual([]);
  checkWindows(
    readers.reads.filter((r) => r.value !== 'bystander'),
    windows,
  );
}

function checkWindows(reads: Read[], windows: Window[]): void {
  let checked = 0;
  let raced = 0;
  for (const w of windows) {
    const during = reads.filter((r) => r.start >= w.from && r.end <= w.to);
    checked += during.length;
    if (during.some((r) => r.value === w.previous) && during.some((r) => r.value === w.value)) raced++;
    // While a change is under way a read shows the old value or the new one, nothing else.
    expect(during.filter((r) => r.value !== w.value && r.value !== w.previous)).toEqual([]);
    // Once settled, no read anywhere shows the old value again (no stale answer was kept).
    expect(during.filter((r) => r.start >= w.settled && r.value !== w.value)).toEqual([]);
    // The gateway that made the write shows it to every read that starts after the write was acknowledged.
    if (w.acked) expect(during.filter((r) => r.gateway === w.acked!.writer && r.start > w.acked!.at && r.value !== w.value)).toEqual([]);
    // Through one gateway, a read that starts after another read ended never shows an older value than that one did.
    for (const gateway of [0, 1]) {
      const mine = during.filter((r) => r.gateway === gateway);
      const firstNew = Math.min(...mine.filter((r) => r.value === w.value).map((r) => r.end));
      expect(mine.filter((r) => r.start > firstNew && r.value !== w.value)).toEqual([]);
    }
  }
  // The readers really raced the changes: many reads in the windows, old and new values both seen in most.
  expect(checked).toBeGreaterThan(500);
  expect(raced).toBeGreaterThanOrEqual(windows.length / 2);
}

it('keeps every gateway on the newest plan while reads race plan changes, and never mixes tenants', async () => {
  const api = gateways[0];
  const owner = await signUp(api, 'Racing');
  const other = await signUp(api, 'Bystander');
  const { key } = await createKey(api, owner.accessToken, { name: 'reader' });
  const tokens = [key, owner.accessToken];
  // identity's own answer, which the cache does not serve (GET /auth/me reads the tenant each time)
  const truth = async () => (await api.get('/api/v1/auth/me', { token: owner.accessToken })).body.data.tenant.plan as string;

  const readers = startReaders(7, async (gateway, n) => {
    // Reader 6 is the other tenant: its record, always.
    const res = await gateways[gateway].get('/api/v1/tenant', { token: n === 6 ? other.accessToken : tokens[n % 2] });
    const expected = n === 6 ? other.tenantId : owner.tenantId;
    if (res.status !== 200 || res.body.data.id !== expected) throw new Error(`${res.status} ${JSON.stringify(res.body)}`);
    if (n === 6) {
      if (res.body.data.plan !== 'free') throw new Error(`the bystander sees ${res.body.data.plan}`);
      return 'bystander';
    }
    return res.body.data.plan as string;
  });
  const windows: Window[] = [];
  try {
    let previous = 'free';
    for (let round = 0; round < 12; round++) {
      const plan = ['starter', 'growth', 'enterprise', 'free'][round % 4];
      const from = performance.now();
      expect((await api.patch(`/api/v1/admin/tenants/${owner.tenantId}`, { plan }, { token: ADMIN })).status).toBe(200);
      await eventually(async () => (await truth()) === plan, 10_000);
      // Both gateways show it within moments (the feed), through both credentials.
      await eventually(() => allShow('/api/v1/tenant', tokens, (b) => b.data.plan, plan), 10_000);
      const settled = performance.now();
      await new Promise((r) => setTimeout(r, 100)); // the readers run on the settled plan for a moment
      windows.push({ value: plan, previous, from, settled, to: performance.now() });
      previous = plan;
    }
  } finally {
    await readers.stop();
  }
  checkRun(readers, windows);
});

it('keeps every gateway on the newest project while reads race renames through both, and forgets it once deleted', async () => {
  const owner = await signUp(gateways[0], 'Projects racing');
  const other = await signUp(gateways[0], 'Projects bystander');
  const { key } = await createKey(gateways[0], owner.accessToken, { name: 'reader' });
  const tokens = [key, owner.accessToken];
  const created = await gateways[0].post('/api/v1/projects', { name: 'name 0' }, { token: owner.accessToken });
  expect(created.status).toBe(201);
  const path = `/api/v1/projects/${created.body.data.id}`;

  const readers = startReaders(7, async (gateway, n) => {
    if (n === 6) {
      // Another tenant asking for the same id: not found, whatever the cache holds.
      const res = await gateways[gateway].get(path, { token: other.accessToken });
      if (res.status !== 404) throw new Error(`another tenant got ${res.status} ${JSON.stringify(res.body)}`);
      return 'bystander';
    }
    const res = await gateways[gateway].get(path, { token: tokens[n % 2] });
    if (res.status === 404) return 'deleted';
    if (res.status !== 200) throw new Error(`${res.status} ${JSON.stringify(res.body)}`);
    return res.body.data.name as string;
  });
  const windows: Window[] = [];
  try {
    let previous = 'name 0';
    for (let round = 1; round <= 16; round++) {
      const name = `name ${round}`;
      const writer = round % 2;
      const from = performance.now();
      const res = await gateways[writer].patch(path, { name }, { token: owner.accessToken });
      expect(res.status).toBe(200);
      const at = performance.now();
      expect((await gateways[writer].get(path, { token: key })).body.data.name).toBe(name);
      await eventually(() => allShow(path, tokens, (b) => b.data?.name, name), 10_000);
      const settled = performance.now();
      await new Promise((r) => setTimeout(r, 100));
      windows.push({ value: name, previous, from, acked: { at, writer }, settled, to: performance.now() });
      previous = name;
    }
    const from = performance.now();
    expect((await gateways[0].del(path, { token: owner.accessToken })).status).toBe(200);
    const at = performance.now();
    expect((await gateways[0].get(path, { token: key })).status).toBe(404);
    await eventually(() => allShow(path, tokens, (b) => (b.error ? 'deleted' : b.data.name), 'deleted'), 10_000);
    const settled = performance.now();
    await new Promise((r) => setTimeout(r, 100));
    windows.push({ value: 'deleted', previous, from, acked: { at, writer: 0 }, settled, to: performance.now() });
  } finally {
    await readers.stop();
  }
  checkRun(readers, windows);
});
