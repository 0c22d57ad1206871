import { type CallContext, errors } from '@svc/kit';
import { authed } from '@svc/contracts';
import type { billingV1 } from '@svc/proto';
import { invoices, subscriptions, usageStats } from '../collections';
import { validModelPrice } from '../reservations';
import { applyUsage } from '../events';
import { toInvoice, toSubscription, usageOf } from '../views';
import { type BillingDeps, type BillingParts } from './shared';

/** The account as the tenant reads it (summary, invoices, balance) and usage recorded by a caller. */
export function ledgerHandlers(deps: BillingDeps, parts: BillingParts) {
  const { store } = deps;
  const { openedAccount } = parts;

  return {
    async getSummary(_req: billingV1.GetSummaryRequest, ctx: CallContext): Promise<billingV1.GetSummaryResponse> {
      const { auth } = authed(ctx);
      const [account, sub, lines] = await Promise.all([
        openedAccount(auth.tid),
        store.collection(subscriptions).findOne({ tenantId: auth.tid, status: 'active' }),
        store.collection(usageStats).find({ tenantId: auth.tid }, { limit: 100 }),
      ]);
      return {
        plan: account?.plan ?? 'free',
        subscription: sub ? toSubscription(sub) : undefined,
        balance: account?.balance ?? 0,
        reserved: account?.reserved ?? 0,
        usage: usageOf(lines.items),
      };
    },

    async listInvoices(req: billingV1.ListInvoicesRequest, ctx: CallContext): Promise<billingV1.ListInvoicesResponse> {
      const { auth } = authed(ctx);
      const page = await store.collection(invoices).find({ tenantId: auth.tid }, { limit: req.limit || 20, cursor: req.cursor || null });
      return { invoices: page.items.map(toInvoice), nextCursor: page.nextCursor ?? '' };
    },

    async getBalance(_req: billingV1.GetBalanceRequest, ctx: CallContext): Promise<billingV1.GetBalanceResponse> {
      const { auth } = authed(ctx);
      const account = await openedAccount(auth.tid);
      return { balance: account.balance, reserved: account.reserved ?? 0 };
    },

    async recordUsage(req: billingV1.RecordUsageRequest, ctx: CallContext): Promise<billingV1.RecordUsageResponse> {
      const { auth } = authed(ctx);
      const problems = [
        !req.callId || req.callId.length > 200 ? { field: 'callId', message: 'must be 1 to 200 characters' } : null,
        !Number.isSafeInteger(req.inputTokens) || req.inputTokens < 0 ? { field: 'inputTokens', message: 'must be >= 0' } : null,
        !Number.isSafeInteger(req.outputTokens) || req.outputTokens < 0 ? { field: 'outputTokens', message: 'must be >= 0' } : null,
        req.cachedInputTokens !== undefined && (!Number.isSafeInteger(req.cachedInputTokens) || req.cachedInputTokens < 0)
          ? { field: 'cachedInputTokens', message: 'must be >= 0' }
          : null,
        validModelPrice(req.price) ? { field: 'price', message: validModelPrice(req.price)! } : null,
      ].filter((p) => p !== null);
      if (problems.length) throw errors.validation(problems);
      await openedAccount(auth.tid);
      // The credential is the caller's own (its token), never one the request names.
      const credits = await applyUsage(
        store,
        deps.creditsPer1kTokens ?? 1,
        auth.tid,
        {
          source: req.source.slice(0, 50) || 'passthrough',
          sourceId: req.sourceId.slice(0, 200),
          provider: req.provider.slice(0, 50),
          model: req.model.slice(0, 200),
          inputTokens: req.inputTokens,
          outputTokens: req.outputTokens,
          keySource: 'tenant',
          credentialId: auth.sid ?? '',
          credentialType: auth.typ ?? '',
          estimated: false,
          callId: req.callId,
          projectId: '',
          agentId: '',
          price: req.price,
          cachedInputTokens: req.cachedInputTokens,
          call: req.call,
        },
        req.callId,
      );
      return { credits };
    },
  };
}
