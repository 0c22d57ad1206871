import { client, createKey, eventually, signUp, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// GET /tenant is answered from the gateway's cache, which identity's feed keeps (gateway/src/lib/read-cache.ts).
// Raced here: readers on two gateways, through an API key and an access token, while the operator changes the plan
// again and again. No gateway may keep an old plan after a change, go back to an old plan once it showed the new one,
// or show one tenant's record to another.
jest.setTimeout(120_000);

const ADMIN = 'operator-token-for-tests-0123456789';
const PLANS = ['starter', 'growth', 'enterprise', 'free'];
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
  plan: string;
}

it('keeps every gateway on the newest plan while reads race plan changes, and never mixes tenants', async () => {
  const api = gateways[0];
  const owner = await signUp(api, 'Racing');
  const other = await signUp(api, 'Bystander');
  const { key } = await createKey(api, owner.accessToken, { name: 'reader' });
  const tokens = [key, owner.accessToken];
  // identity's own answer, which the cache does not serve (GET /auth/me reads the tenant each time)
  const truth = async () => (await api.get('/api/v1/auth/me', { token: owner.accessToken })).body.data.tenant.plan as string;

  const reads: Read[] = [];
  const foreign: string[] = [];
  const failures: string[] = [];
  let running = true;
  const reader = async (n: number) => {
    for (let i = 0; running; i++) {
      const gateway = (n + i) % 2;
      const start = performance.now();
      const res = await gateways[gateway].get('/api/v1/tenant', { token: tokens[n % 2] });
      const end = performance.now();
      if (res.status !== 200 || res.body.data.id !== owner.tenantId) failures.push(`${res.status} ${JSON.stringify(res.body)}`);
      else reads.push({ gateway, start, end, plan: res.body.data.plan });
    }
  };
  const bystander = async () => {
    while (running) {
      const res = await gateways[1].get('/api/v1/tenant', { token: other.accessToken });
      if (res.body.data.id !== other.tenantId || res.body.data.plan !== 'free') foreign.push(JSON.stringify(res.body.data));
    }
  };
  const readers = [...Array.from({ length: 6 }, (_, n) => reader(n)), bystander()];

  const windows: Array<{ plan: string; previous: string; from: number; settled: number; to: number }> = [];
  let previous = 'free';
  try {
    for (let round = 0; round < 12; round++) {
      const plan = PLANS[round % PLANS.length];
      const from = performance.now();
      const set = await api.patch(`/api/v1/admin/tenants/${owner.tenantId}`, { plan }, { token: ADMIN });
      expect(set.status).toBe(200);
      await eventually(async () => (await truth()) === plan, 10_000);
      // Both gateways show it within moments (the feed), through both credentials.
      await eventually(async () => {
        for (const g of gateways)
          for (const token of tokens) if ((await g.get('/api/v1/tenant', { token })).body.data.plan !== plan) return false;
        return true;
      }, 10_000);
      const settled = performance.now();
      // Let the readers run on the settled plan for a moment before the next change.
      await new Promise((r) => setTimeout(r, 100));
      windows.push({ plan, previous, from, settled, to: performance.now() });
      previous = plan;
    }
  } finally {
    running = false;
    await Promise.allSettled(readers);
  }

  expect(failures).toEqual([]);
  expect(foreign).toEqual([]);
  let checked = 0;
  let raced = 0;
  for (const w of windows) {
    const during = reads.filter((r) => r.start >= w.from && r.end <= w.to);
    checked += during.length;
    if (during.some((r) => r.plan === w.previous) && during.some((r) => r.plan === w.plan)) raced++;
    // While a change is under way a read shows the old plan or the new one, nothing else.
    expect(during.filter((r) => r.plan !== w.plan && r.plan !== w.previous)).toEqual([]);
    // Once settled, no read anywhere shows the old plan again (no stale answer was kept).
    expect(during.filter((r) => r.start >= w.settled && r.plan !== w.plan)).toEqual([]);
    // Through one gateway, a read that starts after another read ended never shows an older plan than that one did.
    for (const gateway of [0, 1]) {
      const mine = during.filter((r) => r.gateway === gateway);
      const firstNew = Math.min(...mine.filter((r) => r.plan === w.plan).map((r) => r.end));
      expect(mine.filter((r) => r.start > firstNew && r.plan !== w.plan)).toEqual([]);
    }
  }
  // The readers really raced the changes: many reads in the windows, old and new plans both seen in most.
  expect(checked).toBeGreaterThan(500);
  expect(raced).toBeGreaterThanOrEqual(windows.length / 2);
});
