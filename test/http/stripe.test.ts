import { startFakeStripe, type FakeStripe } from '../helpers/fake-stripe';
import { client, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startStack, type Stack } from '../helpers/stack';

// Billing with Stripe configured, against a local server speaking Stripe's API: purchases and subscriptions go
// through Checkout and settle when Stripe's signed webhook arrives (forwarded raw by the gateway), once.
jest.setTimeout(60_000);

let stripe: FakeStripe;
let stack: Stack;
let api: Client;

beforeAll(async () => {
  stripe = await startFakeStripe();
  stack = await startStack({
    env: { STRIPE_SECRET_KEY: stripe.secretKey, STRIPE_WEBHOOK_SECRET: stripe.webhookSecret, STRIPE_API_URL: stripe.url },
  });
  api = client(stack.url);
});
afterAll(async () => {
  await stack.stop();
  await stripe.close();
});

const summaryOf = async (a: Account) => (await api.get('/api/v1/billing/summary', { token: a.accessToken })).body.data;
async function tenant(name: string): Promise<Account> {
  const a = await signUp(api, name);
  await eventually(async () => (await summaryOf(a)).credits.balance === 1000);
  return a;
}
const deliver = (e: { body: string; signature: string }) =>
  api.request('POST', '/api/v1/billing/webhooks/stripe', {
    raw: e.body,
    headers: { 'content-type': 'application/json; charset=utf-8', 'stripe-signature': e.signature },
  });
const sessionIdOf = (checkoutUrl: string) => checkoutUrl.split('/').pop()!;

it('buys credits through Stripe Checkout: pending until the signed webhook, then credited once however often it comes', async () => {
  const a = await tenant('Stripe buyer');
  const res = await api.post('/api/v1/billing/credits/purchase', { credits: 500 }, { token: a.accessToken });
  expect(res.status).toBe(200);
  const payment = res.body.data;
  expect(payment).toMatchObject({ provider: 'stripe', status: 'pending', creditsAdded: 0, balance: 1000 });
  expect(payment.invoice).toMatchObject({ status: 'open', provider: 'stripe', credits: 500, amountCents: 500, paidAt: null });
  expect(payment.checkoutUrl).toMatch(new RegExp(`^${stripe.url}/c/pay/cs_test_`));

  // What Stripe was asked: one customer for the tenant, one payment session for our invoice, at our price.
  const session = stripe.sessions.get(sessionIdOf(payment.checkoutUrl))!;
  expect(session).toMatchObject({ mode: 'payment', amount_total: 500, currency: 'usd', metadata: { invoiceId: payment.invoice.id } });
  expect((session.metadata as Record<string, string>).tenantId).toBe(a.tenantId);
  expect((await summaryOf(a)).credits.balance).toBe(1000);

  const completed = stripe.signedEvent('checkout.session.completed', session.id as string, { payment_status: 'paid', status: 'complete' });
  // Stripe delivers at least once: the same event, five times at once, credits once.
  const answers = await Promise.all(Array.from({ length: 5 }, () => deliver(completed)));
  expect(answers.map((r) => [r.status, r.body.data])).toEqual(Array(5).fill([200, { received: true }]));
  expect((await summaryOf(a)).credits.balance).toBe(1500);
  expect((await deliver(completed)).status).toBe(200);
  expect((await summaryOf(a)).credits.balance).toBe(1500);

  const invoices = (await api.get('/api/v1/billing/invoices', { token: a.accessToken })).body.data;
  expect(invoices).toEqual([expect.objectContaining({ id: payment.invoice.id, status: 'paid', provider: 'stripe' })]);
  expect(invoices[0].paidAt).not.toBeNull();
});

it('refuses a webhook whose signature does not verify, and changes nothing', async () => {
  const a = await tenant('Stripe forger');
  const payment = (await api.post('/api/v1/billing/credits/purchase', { credits: 300 }, { token: a.accessToken })).body.data;
  const sid = sessionIdOf(payment.checkoutUrl);
  const good = stripe.signedEvent('checkout.session.completed', sid, { payment_status: 'paid' });

  const tampered = good.body.replace('"paid"', '"paid" ');
  expectError(await deliver({ body: tampered, signature: good.signature }), 400, 'VALIDATION_ERROR');
  const wrongSecret = await deliver({ body: good.body, signature: stripe.sign(good.body, 'whsec_not_the_endpoint_secret') });
  expect(expectError(wrongSecret, 400, 'VALIDATION_ERROR').details).toMatchObject({ reason: 'invalid_signature' });
  expectError(await deliver({ body: good.body, signature: '' }), 400, 'VALIDATION_ERROR');
  expect((await summaryOf(a)).credits.balance).toBe(1000);

  expect((await deliver(good)).status).toBe(200);
  expect((await summaryOf(a)).credits.balance).toBe(1300);
});

it('subscribes through Checkout: the plan changes when Stripe says the session completed', async () => {
  const a = await tenant('Stripe subscriber');
  const payment = (await api.post('/api/v1/billing/subscription/create', { plan: 'growth' }, { token: a.accessToken })).body.data;
  expect(payment).toMatchObject({ provider: 'stripe', status: 'pending', subscription: { plan: 'growth', status: 'pending' } });
  const session = stripe.sessions.get(sessionIdOf(payment.checkoutUrl))!;
  expect(session).toMatchObject({ mode: 'subscription', amount_total: payment.invoice.amountCents });
  expect((await summaryOf(a)).plan).toBe('free');

  expect((await deliver(stripe.signedEvent('checkout.session.completed', session.id as string, { payment_status: 'paid' }))).status).toBe(
    200,
  );
  const summary = await summaryOf(a);
  expect(summary).toMatchObject({ plan: 'growth', subscription: { id: payment.subscription.id, plan: 'growth', status: 'active' } });
  // The plan change reaches the services that gate on it (regions, through the event).
  await eventually(
    async () =>
      (await api.get(`/api/v1/regions/features/${a.tenantId}/check/secondary_region`, { token: a.accessToken })).body.data.enabled === true,
  );
});

it('voids the invoice of a checkout that expired, and reuses the Stripe customer for the portal', async () => {
  const a = await tenant('Stripe leaver');
  const payment = (await api.post('/api/v1/billing/credits/purchase', { credits: 50 }, { token: a.accessToken })).body.data;
  const sid = sessionIdOf(payment.checkoutUrl);
  expect((await deliver(stripe.signedEvent('checkout.session.expired', sid, { status: 'expired' }))).status).toBe(200);
  // A completion that arrives after the expiry (out of order) does not credit a void invoice.
  expect((await deliver(stripe.signedEvent('checkout.session.completed', sid, { payment_status: 'paid' }))).status).toBe(200);
  const invoices = (await api.get('/api/v1/billing/invoices', { token: a.accessToken })).body.data;
  expect(invoices[0]).toMatchObject({ id: payment.invoice.id, status: 'void' });
  expect((await summaryOf(a)).credits.balance).toBe(1000);

  const portal = await api.post('/api/v1/billing/portal', undefined, { token: a.accessToken });
  expect(portal.status).toBe(200);
  expect(portal.body.data).toMatchObject({ provider: 'stripe' });
  expect(portal.body.data.url).toMatch(new RegExp(`^${stripe.url}/p/session/`));
  const portalCall = stripe.requests.filter((r) => r.path === '/v1/billing_portal/sessions').pop()!;
  expect(portalCall.form.customer).toBe(stripe.sessions.get(sid)!.customer);
});

it('answers 503 naming the provider when Stripe is down, and records no invoice', async () => {
  const a = await tenant('Stripe outage');
  stripe.failWith = 500;
  try {
    const res = await api.post('/api/v1/billing/credits/purchase', { credits: 10 }, { token: a.accessToken });
    expect(expectError(res, 503, 'SERVICE_UNAVAILABLE').details).toMatchObject({ provider: 'stripe' });
  } finally {
    stripe.failWith = null;
  }
  expect((await api.get('/api/v1/billing/invoices', { token: a.accessToken })).body.data).toEqual([]);
});

it("ignores another tenant's invoice id in a session it did not make", async () => {
  const a = await tenant('Stripe victim');
  const b = await tenant('Stripe attacker');
  const pa = (await api.post('/api/v1/billing/credits/purchase', { credits: 70 }, { token: a.accessToken })).body.data;
  const pb = (await api.post('/api/v1/billing/credits/purchase', { credits: 70 }, { token: b.accessToken })).body.data;
  // A completed session of B's that names A's invoice (metadata is the payer's to shape) settles nothing.
  const forged = stripe.signedEvent('checkout.session.completed', sessionIdOf(pb.checkoutUrl), {
    payment_status: 'paid',
    metadata: { invoiceId: pa.invoice.id, tenantId: a.tenantId },
  });
  expect((await deliver(forged)).status).toBe(200);
  expect((await summaryOf(a)).credits.balance).toBe(1000);
  expect((await summaryOf(b)).credits.balance).toBe(1000);
});
