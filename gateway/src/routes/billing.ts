import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { billingV1 } from '@svc/proto';
import type { GatewayDeps } from '../deps';
import { usageCsv, wantsCsv } from '../lib/csv';
import { pageOf, route } from '../lib/route';
import { Nullable, Obj, PageQuery, Str, Timestamp } from '../schemas';

const Invoice = Obj({
  id: Type.String(),
  kind: Type.String({ description: 'credits or subscription' }),
  description: Type.String(),
  amountCents: Type.Integer(),
  currency: Type.String(),
  status: Type.String({ description: 'open or paid' }),
  provider: Type.String({ description: 'sandbox (settles at once) or stripe' }),
  credits: Type.Integer(),
  plan: Nullable(Type.String()),
  createdAt: Timestamp,
  paidAt: Nullable(Timestamp),
});
const Subscription = Obj({
  id: Type.String(),
  plan: Type.String(),
  status: Type.String(),
  provider: Type.String(),
  currentPeriodStart: Timestamp,
  currentPeriodEnd: Timestamp,
  createdAt: Timestamp,
});
const UsageLine = Obj({
  key: Type.String(),
  kind: Type.String(),
  calls: Type.Integer(),
  inputTokens: Type.Integer(),
  outputTokens: Type.Integer(),
  credits: Type.Integer(),
});
const Summary = Obj({
  plan: Type.String(),
  subscription: Nullable(Subscription),
  credits: Obj({
    balance: Type.Integer(),
    reserved: Type.Integer({ description: 'Credits held by model calls in progress (their most possible cost)' }),
    available: Type.Integer({ description: 'balance - reserved: a model call is accepted only when its reservation fits' }),
  }),
  usage: Obj({
    calls: Type.Integer(),
    inputTokens: Type.Integer(),
    outputTokens: Type.Integer(),
    credits: Type.Integer(),
    byCredential: Type.Array(UsageLine),
    byModel: Type.Array(UsageLine),
  }),
});
const Payment = Obj({
  provider: Type.String(),
  status: Type.String({ description: 'succeeded, or pending until the provider settles (see checkoutUrl)' }),
  invoice: Invoice,
  checkoutUrl: Nullable(Type.String()),
  creditsAdded: Type.Integer(),
  balance: Type.Integer(),
  subscription: Nullable(Subscription),
});

const USAGE_GROUPS = ['model', 'apiKey', 'project', 'agent'] as const;
const UsageQuery = Obj({
  from: Type.String({ maxLength: 40, description: 'ISO 8601: usage at or after this time' }),
  to: Type.String({ maxLength: 40, description: 'ISO 8601: usage before this time (exclusive), at most 366 days after from' }),
  granularity: Type.Optional(Type.Union([Type.Literal('hour'), Type.Literal('day')], { default: 'day', description: 'UTC buckets' })),
  groupBy: Type.Optional(Type.String({ maxLength: 100, description: `Comma-separated subset of ${USAGE_GROUPS.join(', ')}` })),
});
const grouped = (description: string) => Type.Optional(Nullable(Type.String({ description: `${description}; null for none` })));
const UsageRow = Obj({
  start: Timestamp,
  model: grouped(
    'The model as the caller asked for it (a catalogue name, or the default model’s name; calls before prices kept provider/model), present when grouped by model',
  ),
  apiKeyId: grouped('The API key that made the call, present when grouped by apiKey'),
  projectId: grouped('Present when grouped by project'),
  agentId: grouped('Present when grouped by agent'),
  calls: Type.Integer({ description: 'Model calls' }),
  inputTokens: Type.Integer(),
  outputTokens: Type.Integer(),
  credits: Type.Integer({ description: 'Credits debited: every grouping sums to the ledger’s usage debits of the window' }),
});
/** Row fields and the groupBy name that makes each present. */
const GROUPED_FIELDS = [
  ['model', 'model'],
  ['apiKeyId', 'apiKey'],
  ['projectId', 'project'],
  ['agentId', 'agent'],
] as const;

function usageRowView(r: billingV1.UsageRow, groupBy: string[]) {
  const view: Record<string, string | number | null> = { start: r.start };
  for (const [field, group] of GROUPED_FIELDS) if (groupBy.includes(group)) view[field] = r[field] || null;
  return { ...view, calls: r.calls, inputTokens: r.inputTokens, outputTokens: r.outputTokens, credits: r.credits };
}

export function invoiceView(i: billingV1.Invoice) {
  return { ...i, plan: i.plan || null, paidAt: i.paidAt || null };
}
function subscriptionView(s: billingV1.Subscription | undefined) {
  return s ? { ...s } : null;
}
function paymentView(p: billingV1.Payment) {
  return {
    provider: p.provider,
    status: p.status,
    invoice: invoiceView(p.invoice!),
    checkoutUrl: p.checkoutUrl || null,
    creditsAdded: p.creditsAdded,
    balance: p.balance,
    subscription: subscriptionView(p.subscription),
  };
}

const MAX_ALERT_CREDITS = 1_000_000_000_000;
const Alerts = Obj({
  balanceBelow: Type.Optional(
    Type.Integer({ minimum: 0, maximum: MAX_ALERT_CREDITS, description: 'Alert when the balance falls from at least this to below it' }),
  ),
  keyBudgetPercents: Type.Optional(
    Type.Array(Type.Integer({ minimum: 1, maximum: 100 }), {
      maxItems: 10,
      uniqueItems: true,
      description: "Alert when an API key's spend in its budget's period reaches these percents of its creditBudget",
    }),
  ),
  dailyCreditsAbove: Type.Optional(
    Type.Integer({ minimum: 0, maximum: MAX_ALERT_CREDITS, description: "Alert when a UTC day's debits rise above this" }),
  ),
});
function alertsView(a: billingV1.BillingAlerts | undefined) {
  return {
    ...(a?.balanceBelow !== undefined ? { balanceBelow: a.balanceBelow } : {}),
    ...(a?.keyBudgetPercents.length ? { keyBudgetPercents: a.keyBudgetPercents } : {}),
    ...(a?.dailyCreditsAbove !== undefined ? { dailyCreditsAbove: a.dailyCreditsAbove } : {}),
  };
}

/**
 * The `Idempotency-Key` of a billing POST as the gateway scoped it ('' when absent; plugins/idempotency.ts): billing
 * records its answer with the charge, in one transaction (CONTRACT.md 5 and 14).
 */
function idempotencyKey(request: FastifyRequest): string {
  return request.idempotency?.key ?? '';
}

export function billingRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { billing } = deps.clients;

  route(app, {
    method: 'GET',
    url: '/api/v1/billing/summary',
    operationId: 'getBillingSummary',
    access: 'authenticated',
    tag: 'billing',
    summary: 'Plan, subscription, credits (balance, reserved, available) and usage (per API key and per model)',
    response: Summary,
    handler: async ({ call }) => {
      const s = await billing.getSummary({}, call);
      return {
        plan: s.plan,
        subscription: subscriptionView(s.subscription),
        credits: { balance: s.balance, reserved: s.reserved, available: s.balance - s.reserved },
        usage: s.usage,
      };
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/billing/invoices',
    operationId: 'listInvoices',
    access: 'authenticated',
    tag: 'billing',
    summary: 'Invoices, newest first',
    query: PageQuery,
    list: true,
    response: Invoice,
    handler: async ({ query, call }) => {
      const res = await billing.listInvoices({ limit: query.limit, cursor: query.cursor ?? '' }, call);
      return pageOf(res.invoices.map(invoiceView), query.limit, res.nextCursor);
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/billing/usage',
    operationId: 'getBillingUsage',
    access: 'billing:read',
    tag: 'billing',
    summary: 'Model usage by UTC hour or day, grouped by model, API key, project or agent (Accept: text/csv for CSV)',
    query: UsageQuery,
    response: Type.Array(UsageRow),
    alsoProduces: 'text/csv',
    handler: async ({ query, call, request, reply }) => {
      const groupBy = query.groupBy
        ? String(query.groupBy)
            .split(',')
            .map((g: string) => g.trim())
        : [];
      const res = await billing.getUsageAnalytics(
        { from: query.from, to: query.to, granularity: query.granularity ?? 'day', groupBy },
        call,
      );
      const rows = res.rows.map((r) => usageRowView(r, groupBy));
      if (!wantsCsv(request.headers.accept)) return rows;
      return reply
        .code(200)
        .type('text/csv; charset=utf-8')
        .header('content-disposition', 'attachment; filename="usage.csv"')
        .send(usageCsv(rows));
    },
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/billing/credits/purchase',
    operationId: 'purchaseCredits',
    access: 'billing:write',
    tag: 'billing',
    summary: 'Buy credits (honours Idempotency-Key)',
    body: Obj({ credits: Type.Integer({ minimum: 1, maximum: 10_000_000 }) }),
    response: Payment,
    handler: async ({ body, call, request }) =>
      paymentView((await billing.purchaseCredits({ credits: body.credits, idempotencyKey: idempotencyKey(request) }, call)).payment!),
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/billing/subscription/create',
    operationId: 'createSubscription',
    access: 'billing:write',
    tag: 'billing',
    summary: 'Subscribe to a plan (honours Idempotency-Key)',
    body: Obj({ plan: Type.Union(['starter', 'growth', 'enterprise'].map((p) => Type.Literal(p))) }),
    response: Payment,
    handler: async ({ body, call, request }) =>
      paymentView((await billing.createSubscription({ plan: body.plan, idempotencyKey: idempotencyKey(request) }, call)).payment!),
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/billing/portal',
    operationId: 'createBillingPortal',
    access: 'billing:write',
    tag: 'billing',
    summary: "The billing portal's address",
    response: Obj({ url: Type.String(), provider: Type.String() }),
    handler: async ({ call, request }) => billing.createPortal({ idempotencyKey: idempotencyKey(request) }, call),
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/billing/gift-cards/redeem',
    operationId: 'redeemGiftCard',
    access: 'billing:write',
    tag: 'billing',
    summary: 'Redeem a gift card (each code once, for everyone)',
    body: Obj({ code: Str(1, 64) }),
    response: Obj({ creditsAdded: Type.Integer(), balance: Type.Integer() }),
    handler: async ({ body, call, request }) => billing.redeemGiftCard({ code: body.code, idempotencyKey: idempotencyKey(request) }, call),
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/billing/alerts',
    operationId: 'getBillingAlerts',
    access: 'billing:read:manager',
    tag: 'billing',
    summary: 'Alert thresholds: each crossing emits one billing.threshold_crossed event (webhooks)',
    response: Alerts,
    handler: async ({ call }) => alertsView((await billing.getAlerts({}, call)).alerts),
  });

  route(app, {
    method: 'PUT',
    url: '/api/v1/billing/alerts',
    operationId: 'putBillingAlerts',
    access: 'billing:write',
    tag: 'billing',
    summary: 'Replace the alert thresholds (an absent field has no alert)',
    body: Alerts,
    response: Alerts,
    handler: async ({ body, call }) =>
      alertsView(
        (
          await billing.putAlerts(
            {
              alerts: {
                balanceBelow: body.balanceBelow,
                keyBudgetPercents: body.keyBudgetPercents ?? [],
                dailyCreditsAbove: body.dailyCreditsAbove,
              },
            },
            call,
          )
        ).alerts,
      ),
  });

  route(app, {
    method: 'POST',
    url: '/api/v1/billing/webhooks/stripe',
    operationId: 'receiveStripeWebhook',
    access: 'public',
    tag: 'billing',
    summary: "A payment provider's signed webhook event (Stripe: the Stripe-Signature header over the raw body)",
    rawBody: true,
    response: Obj({ received: Type.Boolean() }),
    handler: async ({ request, call }) => {
      const signature = request.headers['stripe-signature'];
      const payload = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
      return billing.handleProviderWebhook(
        { provider: 'stripe', payload, signature: typeof signature === 'string' ? signature : '' },
        call,
      );
    },
  });
}
