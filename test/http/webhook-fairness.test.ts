import { client, eventually, signUp, type Account, type Client } from '../helpers/http';
import { startReceiver, type Receiver } from '../helpers/receiver';
import { startStack, type Stack } from '../helpers/stack';

// One tenant's failing or hanging endpoint delays only its own deliveries (issue 8). A's retry is due 30 s after its
// failure and a hanging attempt lasts 8 s: B's deliveries must arrive long before either.
jest.setTimeout(60_000);

let stack: Stack;
let api: Client;
let receiver: Receiver;

beforeAll(async () => {
  stack = await startStack({
    env: { WEBHOOK_RETRY_SCHEDULE: '30', WEBHOOK_TIMEOUT_MS: '8000', WEBHOOK_CONCURRENCY: '4', WEBHOOK_TENANT_CONCURRENCY: '2' },
  });
  api = client(stack.url);
  receiver = await startReceiver();
  receiver.answer = (r) => (r.path.startsWith('/a-fail') ? { status: 500 } : r.path.startsWith('/a-hold') ? 'hold' : { status: 200 });
});
afterAll(async () => {
  await receiver.close();
  await stack.stop();
});

async function hook(account: Account, path: string): Promise<string> {
  const res = await api.post(
    '/api/v1/webhooks',
    { url: `${receiver.url}${path}`, events: ['project.created'], secret: 'whsec-fairness' },
    { token: account.accessToken },
  );
  expect(res.status).toBe(201);
  return res.body.data.id;
}

const sendTest = async (account: Account, id: string) =>
  expect((await api.post(`/api/v1/webhooks/${id}/test`, undefined, { token: account.accessToken })).status).toBe(202);

it("delivers B's events at once while A's failed delivery waits for its retry", async () => {
  const a = await signUp(api, 'Failing A');
  const b = await signUp(api, 'Healthy B');
  const aHook = await hook(a, '/a-fail');
  // A real event (a test delivery is sent once, without retries).
  expect((await api.post('/api/v1/projects', { name: 'fails to deliver' }, { token: a.accessToken })).status).toBe(201);
  await eventually(async () => receiver.at('/a-fail').length === 1);
  // A's failure is recorded and its retry scheduled.
  await eventually(async () => {
    const list = (await api.get(`/api/v1/webhooks/${aHook}/deliveries`, { token: a.accessToken })).body.data;
    return list[0]?.attempts.length === 1 && list[0].status === 'pending' && list[0].nextAttemptAt !== null;
  });
  const bHook = await hook(b, '/b-after-failure');
  await sendTest(b, bHook);
  const waitedMs = await eventually(async () => receiver.at('/b-after-failure').length === 1, 20_000);
  // A's retry is not due yet: B did not wait for it.
  expect(receiver.at('/a-fail')).toHaveLength(1);
  console.info(`B's test delivery arrived ${waitedMs} ms after it was sent, with A's retry pending`);
});

it("delivers B's events while A's endpoints hang, A holding at most its share of the slots", async () => {
  const a = await signUp(api, 'Hanging A');
  const b = await signUp(api, 'Patient B');
  const aHooks = await Promise.all([1, 2, 3, 4].map((i) => hook(a, `/a-hold-${i}`)));
  for (const id of aHooks) await sendTest(a, id);
  await eventually(async () => receiver.requests.filter((r) => r.path.startsWith('/a-hold')).length === 2);
  const bHook = await hook(b, '/b-while-hanging');
  await sendTest(b, bHook);
  await eventually(async () => receiver.at('/b-while-hanging').length === 1, 20_000);
  // A's attempts are still open (none has ended, by answer or timeout), and only two of its four were started.
  expect(receiver.requests.filter((r) => r.path.startsWith('/a-hold'))).toHaveLength(2);
  for (const id of aHooks) {
    const list = (await api.get(`/api/v1/webhooks/${id}/deliveries`, { token: a.accessToken })).body.data;
    expect(list[0].attempts).toHaveLength(0);
  }
});
