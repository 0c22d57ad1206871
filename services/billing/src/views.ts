import type { billingV1 } from '@svc/proto';
import type { AlertsDoc } from './alerts';
import type { InvoiceDoc, SubscriptionDoc, UsageStatDoc } from './collections';
import type { RequestLogDoc } from './request-log';

export function toInvoice(i: InvoiceDoc): billingV1.Invoice {
  return {
    id: i.id,
    kind: i.kind,
    description: i.description,
    amountCents: i.amountCents,
    currency: i.currency,
    status: i.status,
    provider: i.provider,
    credits: i.credits,
    plan: i.plan,
    createdAt: i.createdAt,
    paidAt: i.paidAt ?? '',
  };
}

export function toSubscription(s: SubscriptionDoc): billingV1.Subscription {
  return {
    id: s.id,
    plan: s.plan,
    status: s.status,
    provider: s.provider,
    currentPeriodStart: s.currentPeriodStart,
    currentPeriodEnd: s.currentPeriodEnd,
    createdAt: s.createdAt,
  };
}

/** Totals and the per-credential and per-model lines of the summary. */
export function usageOf(stats: UsageStatDoc[]): billingV1.Usage {
  const line = (s: UsageStatDoc): billingV1.UsageLine => ({
    key: s.key,
    kind: s.kind,
    calls: s.calls,
    inputTokens: s.inputTokens,
    outputTokens: s.outputTokens,
    credits: s.credits,
  });
  const byModel = stats.filter((s) => s.group === 'model');
  return {
    calls: byModel.reduce((n, s) => n + s.calls, 0),
    inputTokens: byModel.reduce((n, s) => n + s.inputTokens, 0),
    outputTokens: byModel.reduce((n, s) => n + s.outputTokens, 0),
    credits: byModel.reduce((n, s) => n + s.credits, 0),
    byCredential: stats.filter((s) => s.group === 'credential').map(line),
    byModel: byModel.map(line),
  };
}

export function toBillingAlerts(doc: AlertsDoc | null): billingV1.BillingAlerts {
  return {
    balanceBelow: doc?.balanceBelow ?? undefined,
    keyBudgetPercents: doc?.keyBudgetPercents ?? [],
    dailyCreditsAbove: doc?.dailyCreditsAbove ?? undefined,
  };
}

export function toRequestLogEntry(d: RequestLogDoc): billingV1.RequestLogEntry {
  return {
    id: d.id,
    at: d.at,
    source: d.source,
    requestId: d.requestId,
    apiKeyId: d.apiKeyId,
    userId: d.userId,
    endUser: d.endUser,
    model: d.model,
    servedModel: d.servedModel,
    provider: d.provider,
    status: d.status,
    errorCode: d.errorCode,
    inputTokens: d.inputTokens,
    outputTokens: d.outputTokens,
    credits: d.credits,
    latencyMs: d.latencyMs,
    ttftMs: d.ttftMs,
  };
}
