/** The billing handlers' dependencies and the parts they share. */
import { timingSafeEqual } from 'node:crypto';
import { addToOutbox, errors, newId, nowIso, sha256Hex, type OutboxRelay, type Store, type StoreSession } from '@svc/kit';
import { domainEvent, TOPICS } from '@svc/contracts';
import { isPlan, type Plan } from '@svc/plans';
import type { billingV1, identityV1 } from '@svc/proto';
import { accounts, invoices, subscriptions, type AccountDoc, type InvoiceDoc, type SubscriptionDoc } from '../collections';
import { grantStartingCredits } from '../events';
import { type Commit } from '../idempotency';
import { type PaymentProvider, type ProviderEvent } from '../providers';
import { accountOf, addEntry, applyOnce } from '../ledger';
import { forgetKeyBudget, lastKeyBudget, type KeyBudget } from '../key-budget';
import { toInvoice, toSubscription } from '../views';
import type { EscrowPolicy } from '../escrows';

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
  /** How escrows are granted (escrows.ts); default DEFAULT_ESCROW_POLICY with the reservation TTL as grace. */
  escrowPolicy?: EscrowPolicy;
  /**
   * The current limits of the API key a token speaks for (identity's GetCallerKeyLimits, kept at most half a second and
   * refreshed in the background: contracts key-limits.ts): a key's credit budget as its reservations see it. Absent: budgets are not enforced (tests of
   * other parts).
   */
  keyLimits?: (token: string, tenantId: string, keyId: string) => Promise<identityV1.ApiKeyLimits | undefined>;
  /** This replica's wall clock (a test skews it); it stamps a plan change's time, which orders nothing. */
  now?: () => Date;
}

/** Largest purchase or grant in one call: keeps sums far from Number.MAX_SAFE_INTEGER. */
export const MAX_CREDITS = 100_000_000;
export const SANDBOX = 'sandbox';

/** The answer of a payment the sandbox settled at once (it says so: provider `sandbox`, status `succeeded`). */
export function settled(invoice: InvoiceDoc, creditsAdded: number, balance: number, sub?: SubscriptionDoc): billingV1.Payment {
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

export type BillingParts = ReturnType<typeof billingParts>;

/** What the handlers share: the caller's account, the operator check, plan changes and the sandbox's payments. */
export function billingParts(deps: BillingDeps) {
  const { store } = deps;

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
   * The calling key's credit budget as identity answered a question sent at most KEY_LIMITS_HARD_MS ago (a change
   * counts within that on every replica; identity down: refused once that has passed). A key identity answers no limits for (revoked, or gone) keeps the budget it last
   * had, so the work it started stays bounded (key-budget.ts).
   */
  async function callerKeyBudget(tenantId: string, keyId: string, token: string): Promise<KeyBudget | undefined> {
    const limits = await deps.keyLimits!(token, tenantId, keyId);
    if (!limits) return lastKeyBudget(store, tenantId, keyId);
    const budget = limits.creditBudget;
    if (!budget) {
      await forgetKeyBudget(store, tenantId, keyId);
      return undefined;
    }
    return { keyId, credits: budget.credits, period: budget.period === 'month' ? 'month' : 'total' };
  }

  return {
    adminOnly,
    knownTenant,
    openedAccount,
    positiveCredits,
    changePlan,
    paidInvoice,
    rememberCustomer,
    checkoutPayment,
    activate,
    settle,
    callerKeyBudget,
  };
}
