import { AppError, type CallContext, errors, newId, nowIso, sha256Hex } from '@svc/kit';
import { authed } from '@svc/contracts';
import { isPlan } from '@svc/plans';
import type { billingV1 } from '@svc/proto';
import { accounts, giftCards, subscriptions } from '../collections';
import { idempotent } from '../idempotency';
import { providerNamed } from '../providers';
import { addEntry } from '../ledger';
import { MONTHLY_PRICE_CENTS } from '../plans';
import { type BillingDeps, type BillingParts, SANDBOX, settled } from './shared';

/** Credits and plans bought (checkout, subscription, portal, gift cards) and the payment provider's webhooks. */
export function purchaseHandlers(deps: BillingDeps, parts: BillingParts) {
  const { store, relay } = deps;
  const { positiveCredits, paidInvoice, rememberCustomer, checkoutPayment, activate, settle } = parts;

  return {
    async purchaseCredits(req: billingV1.PurchaseCreditsRequest, ctx: CallContext): Promise<billingV1.PurchaseCreditsResponse> {
      const { auth } = authed(ctx, 'billing:write');
      const credits = positiveCredits(req.credits, 'credits', 10_000_000);
      const scope = { tenantId: auth.tid, operation: 'purchase', key: req.idempotencyKey, body: { credits } };
      return idempotent(store, scope, async (commit) => {
        const fields = {
          kind: 'credits' as const,
          description: `${credits} credits`,
          amountCents: credits * deps.creditPriceCents,
          credits,
          plan: '',
        };
        if (!deps.provider.settlesAtOnce) return checkoutPayment(auth.tid, fields, commit);
        return commit(async (tx) => {
          const invoice = await paidInvoice(tx, { tenantId: auth.tid, ...fields });
          const applied = await addEntry(tx, {
            tenantId: auth.tid,
            sourceKey: `purchase:${invoice.id}`,
            kind: 'purchase',
            credits,
            description: `Purchase (${invoice.id})`,
          });
          return { payment: settled(invoice, credits, applied!.balance) };
        });
      });
    },

    async createSubscription(req: billingV1.CreateSubscriptionRequest, ctx: CallContext): Promise<billingV1.CreateSubscriptionResponse> {
      const { auth } = authed(ctx, 'billing:write');
      if (!isPlan(req.plan) || req.plan === 'free')
        throw errors.validation([{ field: 'plan', message: 'must be one of starter, growth, enterprise' }]);
      const plan = req.plan;
      const scope = { tenantId: auth.tid, operation: 'subscribe', key: req.idempotencyKey, body: { plan } };
      const answer = await idempotent<billingV1.CreateSubscriptionResponse>(store, scope, async (commit) => {
        const current = await store.collection(subscriptions).findOne({ tenantId: auth.tid, status: 'active' });
        if (current?.plan === plan) throw errors.conflict(`Already subscribed to ${plan}`, { reason: 'already_subscribed', plan });
        const fields = {
          kind: 'subscription' as const,
          description: `${plan} plan, first month`,
          amountCents: MONTHLY_PRICE_CENTS[plan],
          credits: 0,
          plan,
        };
        if (!deps.provider.settlesAtOnce) return checkoutPayment(auth.tid, fields, commit);
        return commit(async (tx) => {
          // Again inside the transaction: of two concurrent subscriptions to one plan, the second is refused.
          const active = await tx.collection(subscriptions).findOne({ tenantId: auth.tid, status: 'active' });
          if (active?.plan === plan) throw errors.conflict(`Already subscribed to ${plan}`, { reason: 'already_subscribed', plan });
          const invoice = await paidInvoice(tx, { tenantId: auth.tid, ...fields });
          const now = nowIso();
          const pending = await tx.collection(subscriptions).insert({
            id: newId('sub'),
            tenantId: auth.tid,
            plan,
            status: 'pending',
            provider: SANDBOX,
            invoiceId: invoice.id,
            currentPeriodStart: '',
            currentPeriodEnd: '',
            createdAt: now,
          });
          const sub = await activate(tx, pending);
          const account = await tx.collection(accounts).get(auth.tid);
          return { payment: settled(invoice, 0, account?.balance ?? 0, sub) };
        });
      });
      relay.notify();
      return answer;
    },

    async createPortal(_req: billingV1.CreatePortalRequest, ctx: CallContext): Promise<billingV1.CreatePortalResponse> {
      const { auth } = authed(ctx, 'billing:write');
      // The sandbox's portal is our own page (/settings/billing); Stripe's is a billing-portal session.
      const account = await store.collection(accounts).get(auth.tid);
      const portal = await deps.provider.portal(auth.tid, account?.providerCustomerId ?? null);
      if (portal.customerId && !account?.providerCustomerId)
        await store.transaction((tx) => rememberCustomer(tx, auth.tid, portal.customerId));
      return { url: portal.url, provider: deps.provider.name };
    },

    async redeemGiftCard(req: billingV1.RedeemGiftCardRequest, ctx: CallContext): Promise<billingV1.RedeemGiftCardResponse> {
      const { auth } = authed(ctx, 'billing:write');
      const code = req.code.trim().toUpperCase();
      if (!code || code.length > 64) throw errors.validation([{ field: 'code', message: 'must be 1 to 64 characters' }]);
      const id = sha256Hex(code);
      return idempotent(store, { tenantId: auth.tid, operation: 'redeem', key: req.idempotencyKey, body: { code: id } }, (commit) =>
        commit(async (tx) => {
          const cards = tx.collection(giftCards);
          const card = await cards.get(id);
          if (!card) throw new AppError('RESOURCE_NOT_FOUND', 'gift_card not found', { resource: 'gift_card', id: req.code.slice(0, 64) });
          if (card.status !== 'active') throw errors.conflict('This gift card was already redeemed', { reason: 'gift_card_redeemed' });
          if (card.expiresAt && card.expiresAt <= nowIso())
            throw errors.conflict('This gift card has expired', { reason: 'gift_card_expired' });
          // Compare-and-set: of concurrent redemptions exactly one moves the card from active to redeemed.
          const won = await cards.update(id, { status: 'active' }, { status: 'redeemed', redeemedBy: auth.tid, redeemedAt: nowIso() });
          if (!won) throw errors.conflict('This gift card was already redeemed', { reason: 'gift_card_redeemed' });
          const applied = await addEntry(tx, {
            tenantId: auth.tid,
            sourceKey: `gift:${id}`,
            kind: 'gift_card',
            credits: card.credits,
            description: 'Gift card',
          });
          return { creditsAdded: card.credits, balance: applied!.balance };
        }),
      );
    },

    async handleProviderWebhook(req: billingV1.HandleProviderWebhookRequest): Promise<billingV1.HandleProviderWebhookResponse> {
      // The sandbox sends no webhooks; a provider other than the configured one is unknown here.
      const event = providerNamed(deps.provider, req.provider).parseWebhook(Buffer.from(req.payload), req.signature);
      if (event.type !== 'ignored') {
        await settle(event);
        relay.notify();
      }
      return { received: true };
    },
  };
}
