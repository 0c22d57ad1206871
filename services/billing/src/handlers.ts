import { randomBytes, timingSafeEqual } from 'node:crypto';
import {
  addToOutbox,
  AppError,
  authed,
  type CallContext,
  errors,
  newId,
  nowIso,
  randomBase62,
  sha256Hex,
  type OutboxRelay,
  type Store,
  type StoreSession,
} from '@svc/kit';
import { domainEvent, TOPICS } from '@svc/contracts';
import { isPlan, type Plan } from '@svc/plans';
import type { billingV1, identityV1 } from '@svc/proto';
import {
  accounts,
  giftCards,
  invoices,
  subscriptions,
  usageStats,
  type AccountDoc,
  type InvoiceDoc,
  type SubscriptionDoc,
} from './collections';
import { grantStartingCredits } from './events';
import { idempotent, type Commit } from './idempotency';
import { providerNamed, type PaymentProvider, type ProviderEvent } from './providers';
import { accountOf, addEntry, applyOnce } from './ledger';
import { forgetKeyBudget, lastKeyBudget, type KeyBudget } from './key-budget';
import { closeReservation, reserve, validModelPrice, validReserve } from './reservations';
import { applyUsage } from './events';
import { MONTHLY_PRICE_CENTS } from './plans';
import { toInvoice, toSubscription, usageOf } from './views';

export interface BillingDeps {
  store: Store;
  relay: OutboxRelay;
  /** The operator token (SVC_ADMIN_TOKEN); the admin calls are refused when unset. */
  adminToken: string | undefined;
  provider: PaymentProvider;
  creditPriceCents: number;
  /** Credits of a new tenant (BILLING_STARTING_GRANT), granted by its first call when tenant.created is still due. */
  startingGrant: number;
  /** CREDITS_PER_1K_TOKENS: prices a reservation's tokens as usage. */
  creditsPer1kTokens?: number;
  /** BILLING_RESERVATION_TTL_MS: a reservation's life when its caller names none. */
  reservationTtlMs?: number;
  /**
   * The current limits of the API key a token speaks for (identity's GetCallerKeyLimits): a key's credit budget is
   * read at each of its reservations. Absent: budgets are not enforced (tests of other parts).
   */
  keyLimits?: (token: string) => Promise<identityV1.ApiKeyLimits | undefined>;
  /** This replica's wall clock (a test skews it); it stamps a plan change's time, which orders nothing. */
  now?: () => Date;
}

/** Largest purchase or grant in one call: keeps sums far from Number.MAX_SAFE_INTEGER. */
const MAX_CREDITS = 100_000_000;
const SANDBOX = 'sandbox';

/** The answer of a payment the sandbox settled at once (it says so: provider `sandbox`, status `succeeded`). */
function settled(invoice: InvoiceDoc, creditsAdded: number, balance: number, sub?: SubscriptionDoc): billingV1.Payment {
  return {
    provider: SANDBOX,
    status: 'succeeded',
    invoice: toInvoice(invoice),
    checkoutUrl: '',
    creditsAdded,
    balance,
    subscription: sub ? toSubscription(sub) : undefined,
  };
}

export function billingHandlers(deps: BillingDeps) {
  const { store, relay } = deps;

  function adminOnly(token: string): void {
    const expected = deps.adminToken;
    const a = Buffer.from(sha256Hex(token || '-'));
    const b = Buffer.from(sha256Hex(expected ?? ''));
    if (!expected || !timingSafeEqual(a, b)) throw errors.unauthorized('Invalid operator token');
  }

  /** A tenant billing knows (its account is made by the starting grant of tenant.created). */
  async function knownTenant(tenantId: string): Promise<void> {
    if (!tenantId || !(await store.collection(accounts).get(tenantId))) throw errors.notFound('tenant', tenantId);
  }

  /** The caller's account; a tenant whose tenant.created has not arrived yet gets its starting grant now. */
  async function openedAccount(tenantId: string): Promise<AccountDoc> {
    const found = await store.collection(accounts).get(tenantId);
    if (found) return found;
    await grantStartingCredits(store, tenantId, deps.startingGrant);
    return (await store.collection(accounts).get(tenantId))!;
  }

  function positiveCredits(value: number, field: string, max = MAX_CREDITS): number {
    if (!Number.isInteger(value) || value < 1 || value > max)
      throw errors.validation([{ field, message: `must be an integer from 1 to ${max}` }]);
    return value;
  }

  /**
   * Sets the plan and tells every service that keeps a copy (identity, regions), in one transaction. The change's
   * version is the account's counter moved in this transaction: two changes of a tenant serialise on it, so the
   * later commit has the higher version on any replica, whatever its clock (consumers order by it).
   */
  async function changePlan(tx: StoreSession, tenantId: string, plan: Plan): Promise<void> {
    const account = await accountOf(tx, tenantId);
    const changedAt = (deps.now?.() ?? new Date()).toISOString();
    const numbered = await tx.collection(accounts).increment(tenantId, {}, { planVersion: 1 });
    const version = numbered!.planVersion!;
    await tx.collection(accounts).update(tenantId, {}, { plan, planChangedAt: changedAt, updatedAt: changedAt });
    await addToOutbox(
      tx,
      domainEvent(TOPICS.billing, 'tenant.plan_changed', tenantId, {
        $case: 'plan',
        value: { tenantId, plan, previousPlan: account.plan, changedAt, version },
      }),
    );
  }

  /** A paid invoice of the sandbox provider: it settles at once, and says so. */
  async function paidInvoice(
    tx: StoreSession,
    fields: Pick<InvoiceDoc, 'tenantId' | 'kind' | 'description' | 'amountCents' | 'credits' | 'plan'>,
  ) {
    const now = nowIso();
    return tx.collection(invoices).insert({
      id: newId('inv'),
      ...fields,
      currency: 'usd',
      status: 'paid',
      provider: SANDBOX,
      providerRef: null,
      createdAt: now,
      paidAt: now,
    });
  }

  /** Keeps the provider's customer of a tenant (the first one made wins; a lost race leaves an unused customer). */
  async function rememberCustomer(tx: StoreSession, tenantId: string, customerId: string | null): Promise<void> {
    const account = await accountOf(tx, tenantId);
    if (customerId && !account.providerCustomerId)
      await tx.collection(accounts).update(tenantId, {}, { providerCustomerId: customerId, updatedAt: nowIso() });
  }

  /**
   * A payment through a provider that settles later (Stripe): its checkout first (outside any transaction, keyed
   * by our invoice id), then an open invoice (and a pending subscription) that its webhook settles, committed with
   * the answer. A crash between the two leaves a checkout nobody was shown: it expires unpaid.
   */
  async function checkoutPayment(
    tenantId: string,
    fields: Pick<InvoiceDoc, 'kind' | 'description' | 'amountCents' | 'credits' | 'plan'>,
    commit: Commit<{ payment?: billingV1.Payment }>,
  ): Promise<{ payment?: billingV1.Payment }> {
    const { provider } = deps;
    const invoiceId = newId('inv');
    const account = await store.collection(accounts).get(tenantId);
    const checkout = await provider.checkout({
      tenantId,
      invoiceId,
      kind: fields.kind,
      description: fields.description,
      amountCents: fields.amountCents,
      currency: 'usd',
      customerId: account?.providerCustomerId ?? null,
    });
    return commit(async (tx) => {
      const now = nowIso();
      const invoice = await tx.collection(invoices).insert({
        id: invoiceId,
        tenantId,
        ...fields,
        currency: 'usd',
        status: 'open',
        provider: provider.name,
        providerRef: checkout.ref,
        createdAt: now,
        paidAt: null,
      });
      const sub =
        fields.kind === 'subscription'
          ? await tx.collection(subscriptions).insert({
              id: newId('sub'),
              tenantId,
              plan: fields.plan,
              status: 'pending',
              provider: provider.name,
              invoiceId,
              currentPeriodStart: '',
              currentPeriodEnd: '',
              createdAt: now,
            })
          : undefined;
      await rememberCustomer(tx, tenantId, checkout.customerId);
      return {
        payment: {
          provider: provider.name,
          status: 'pending',
          invoice: toInvoice(invoice),
          checkoutUrl: checkout.url,
          creditsAdded: 0,
          balance: account?.balance ?? 0,
          subscription: sub ? toSubscription(sub) : undefined,
        },
      };
    });
  }

  /** Ends the tenant's active subscription and starts `sub` for a month from now, with its plan. */
  async function activate(tx: StoreSession, sub: SubscriptionDoc): Promise<SubscriptionDoc> {
    const subs = tx.collection(subscriptions);
    const current = await subs.findOne({ tenantId: sub.tenantId, status: 'active' });
    if (current && current.id !== sub.id) await subs.update(current.id, { status: 'active' }, { status: 'ended' });
    const start = new Date();
    const end = new Date(start);
    end.setUTCMonth(end.getUTCMonth() + 1);
    const period = { status: 'active' as const, currentPeriodStart: start.toISOString(), currentPeriodEnd: end.toISOString() };
    const active = sub.status === 'active' ? sub : await subs.update(sub.id, { status: sub.status }, period);
    await tx.collection(accounts).update(sub.tenantId, {}, { subscriptionId: sub.id });
    if (isPlan(sub.plan)) await changePlan(tx, sub.tenantId, sub.plan);
    return active ?? { ...sub, ...period };
  }

  /** Settles (or voids) the invoice a provider's event names, once: a redelivered event changes nothing. */
  async function settle(event: Exclude<ProviderEvent, { type: 'ignored' }>): Promise<void> {
    await applyOnce(store, async (tx) => {
      const inv = await tx.collection(invoices).get(event.invoiceId);
      // Not one of ours (another system on the same Stripe account): received, nothing to do.
      if (!inv || inv.providerRef !== event.ref) return;
      const sub = inv.kind === 'subscription' ? await tx.collection(subscriptions).findOne({ invoiceId: inv.id }) : null;
      if (event.type === 'checkout_expired') {
        if (!(await tx.collection(invoices).update(inv.id, { status: 'open' }, { status: 'void' }))) return;
        if (sub) await tx.collection(subscriptions).update(sub.id, { status: 'pending' }, { status: 'ended' });
        return;
      }
      // Compare-and-set open -> paid: of two deliveries of one event (or of two replicas) exactly one settles.
      if (!(await tx.collection(invoices).update(inv.id, { status: 'open' }, { status: 'paid', paidAt: nowIso() }))) return;
      await rememberCustomer(tx, inv.tenantId, event.customerId);
      if (inv.kind === 'credits')
        await addEntry(tx, {
          tenantId: inv.tenantId,
          sourceKey: `purchase:${inv.id}`,
          kind: 'purchase',
          credits: inv.credits,
          description: `Purchase (${inv.id})`,
        });
      else if (sub) await activate(tx, sub);
    });
  }

  /**
   * The calling key's credit budget, asked of identity per reservation, not cached: a change counts from identity's
   * commit (identity down: refused). A key identity answers no limits for (revoked, or gone) keeps the budget it last
   * had, so the work it started stays bounded (key-budget.ts).
   */
  async function callerKeyBudget(tenantId: string, keyId: string, token: string): Promise<KeyBudget | undefined> {
    const limits = await deps.keyLimits!(token);
    if (!limits) return lastKeyBudget(store, tenantId, keyId);
    const budget = limits.creditBudget;
    if (!budget) {
      await forgetKeyBudget(store, tenantId, keyId);
      return undefined;
    }
    return { keyId, credits: budget.credits, period: budget.period === 'month' ? 'month' : 'total' };
  }

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

    async reserve(req: billingV1.ReserveRequest, ctx: CallContext): Promise<billingV1.ReserveResponse> {
      const { auth } = authed(ctx);
      const input = {
        tenantId: auth.tid,
        callId: req.callId,
        tokens: req.tokens,
        source: req.source.slice(0, 50),
        sourceId: req.sourceId.slice(0, 200),
        ttlMs: req.ttlMs || (deps.reservationTtlMs ?? 600_000),
        ...(req.price ? { price: req.price, inputTokens: req.inputTokens ?? 0, outputTokens: req.outputTokens ?? 0 } : {}),
      };
      const problem = validReserve(input);
      if (problem) throw errors.validation([{ field: problem.split(' ')[0], message: problem }]);
      const keyBudget = auth.typ === 'api_key' && deps.keyLimits ? await callerKeyBudget(auth.tid, auth.sid, ctx.token!) : undefined;
      // A tenant whose tenant.created is still on its way starts with its grant, as every first call does.
      await openedAccount(auth.tid);
      const { doc, credits } = await reserve(store, { ...input, keyBudget }, deps.creditsPer1kTokens ?? 1);
      return { reservationId: doc.id, credits: doc.credits, available: credits.available, status: doc.status };
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

    async release(req: billingV1.ReleaseRequest, ctx: CallContext): Promise<billingV1.ReleaseResponse> {
      const { auth } = authed(ctx);
      if (!req.callId) throw errors.validation([{ field: 'callId', message: 'is required' }]);
      const closed = await store.transaction((tx) => closeReservation(tx, auth.tid, req.callId, 'released'));
      return { released: closed !== null };
    },

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

    async adminMintGiftCards(req: billingV1.AdminMintGiftCardsRequest): Promise<billingV1.AdminMintGiftCardsResponse> {
      adminOnly(req.adminToken);
      const credits = positiveCredits(req.credits, 'credits');
      if (!Number.isInteger(req.count) || req.count < 1 || req.count > 1000)
        throw errors.validation([{ field: 'count', message: 'must be an integer from 1 to 1000' }]);
      if (req.expiresAt && (Number.isNaN(Date.parse(req.expiresAt)) || req.expiresAt <= nowIso()))
        throw errors.validation([{ field: 'expiresAt', message: 'must be a future ISO 8601 time' }]);
      const codes = Array.from(
        { length: req.count },
        () =>
          `GIFT-${randomBase62(20)
            .toUpperCase()
            .replace(/(.{5})(?=.)/g, '$1-')}`,
      );
      const now = nowIso();
      await store.transaction(async (tx) => {
        for (const code of codes)
          await tx.collection(giftCards).insert({
            id: sha256Hex(code),
            credits,
            expiresAt: req.expiresAt ? new Date(req.expiresAt).toISOString() : null,
            status: 'active',
            redeemedBy: null,
            redeemedAt: null,
            createdAt: now,
          });
      });
      return { codes };
    },

    async adminSetPlan(req: billingV1.AdminSetPlanRequest, ctx?: CallContext): Promise<billingV1.AdminSetPlanResponse> {
      adminOnly(req.adminToken);
      if (!isPlan(req.plan)) throw errors.validation([{ field: 'plan', message: 'must be one of free, starter, growth, enterprise' }]);
      const plan = req.plan;
      await knownTenant(req.tenantId);
      await store.transaction(async (tx) => {
        const before = (await accountOf(tx, req.tenantId)).plan;
        await changePlan(tx, req.tenantId, plan);
        await addToOutbox(tx, operatorAudit(ctx, req.tenantId, 'admin.plan_changed', { before: { plan: before }, after: { plan } }));
      });
      relay.notify();
      return { tenantId: req.tenantId, plan };
    },

    async adminAdjustCredits(req: billingV1.AdminAdjustCreditsRequest, ctx?: CallContext): Promise<billingV1.AdminAdjustCreditsResponse> {
      adminOnly(req.adminToken);
      if (!Number.isInteger(req.delta) || req.delta === 0 || Math.abs(req.delta) > MAX_CREDITS)
        throw errors.validation([{ field: 'delta', message: `must be a non-zero integer from -${MAX_CREDITS} to ${MAX_CREDITS}` }]);
      const reason = req.reason.trim();
      if (!reason || reason.length > 500) throw errors.validation([{ field: 'reason', message: 'must be 1 to 500 characters' }]);
      await knownTenant(req.tenantId);
      // A retried call (same request id) applies once.
      const sourceKey = `adjust:${req.requestId || randomBytes(12).toString('hex')}`;
      const balance = await applyOnce(store, async (tx) => {
        const applied = await addEntry(tx, {
          tenantId: req.tenantId,
          sourceKey,
          kind: 'adjustment',
          credits: req.delta,
          description: reason,
        });
        if (!applied) return (await tx.collection(accounts).get(req.tenantId))?.balance ?? 0;
        await addToOutbox(
          tx,
          operatorAudit(ctx, req.tenantId, 'admin.credits_adjusted', {
            before: { balance: applied.balance - req.delta },
            after: { balance: applied.balance, delta: req.delta, reason },
          }),
        );
        return applied.balance;
      });
      relay.notify();
      return { balance };
    },
  };
}

/**
 * An operator action for the tenant's audit log (CONTRACT.md 10): an `audit.recorded` event in the action's own
 * transaction, which identity adds to the tenant's chain (services/identity/src/audit).
 */
function operatorAudit(
  ctx: CallContext | undefined,
  tenantId: string,
  action: 'admin.plan_changed' | 'admin.credits_adjusted',
  changes: { before: Record<string, unknown>; after: Record<string, unknown> },
) {
  return domainEvent(TOPICS.billing, 'audit.recorded', tenantId, {
    $case: 'auditEntry',
    value: {
      id: newId('aud'),
      at: nowIso(),
      actor: { type: 'admin', id: 'operator' },
      action,
      target: { type: 'tenant', id: tenantId },
      ip: ctx?.clientIp ?? undefined,
      userAgent: ctx?.userAgent ?? undefined,
      requestId: ctx?.requestId,
      changes: { before: changes.before, after: changes.after },
      hash: '',
    },
  });
}
