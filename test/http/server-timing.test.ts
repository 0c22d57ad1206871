import { client, signUp, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// Every answer says what the gateway added: `Server-Timing: gw;dur=..., upstream;dur=..., total;dur=...` (ms).
let stack: Stack;
let api: Client;

beforeAll(async () => {
  stack = await startStack();
  api = client(stack.url);
});
afterAll(() => stack.stop());

function timing(header: string | null): Record<string, number> {
  expect(header).toMatch(/^gw;dur=[\d.]+, upstream;dur=[\d.]+, total;dur=[\d.]+$/);
  return Object.fromEntries(header!.split(', ').map((part) => [part.split(';')[0], Number(part.split('dur=')[1])]));
}

it("splits a request into the gateway's own time and the time in services, consistently", async () => {
  const owner = await signUp(api, 'Timed');
  const t = timing((await api.get('/api/v1/tenant', { token: owner.accessToken })).headers.get('server-timing'));
  expect(t.upstream).toBeGreaterThan(0);
  expect(t.gw).toBeGreaterThanOrEqual(0);
  expect(Math.abs(t.gw + t.upstream - t.total)).toBeLessThan(0.02);
});

it('is on errors and on answers that call no service (upstream 0)', async () => {
  for (const res of [await api.get('/api/v1/tenant'), await api.get('/healthz'), await api.get('/api/v1/no-such-route')]) {
    const t = timing(res.headers.get('server-timing'));
    expect(t.upstream).toBe(0);
    expect(t.gw).toBe(t.total);
  }
});
