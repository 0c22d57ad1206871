import { idempotency, type CollectionDef } from '@svc/kit';

/** One per tenant (id = tenant id): the balance the ledger's entries add up to, and the plan. */
export interface AccountDoc {
  id: string;
  tenantId: string;
  /** Sum of the tenant's ledger entries, kept with `$inc` in the transaction that adds each entry. */
  balance: number;
  /** Sum of the open reservations' credits (absent: none yet), moved with each one's opening and closing. */
  reserved?: number;
  /** The UTC day (`YYYY-MM-DD`, billing's clock) whose debits `debitsOfDay` sums: the daily alert's value (alerts.ts). */
  debitsDay?: string;
  debitsOfDay?: number;
  plan: string;
  /** When the plan last changed (ISO, this replica's clock), '' for never: informational, not an order. */
  planChangedAt: string;
  /**
   * The number of the last plan change (absent: none yet), incremented in the transaction of each change and carried
   * by its event: consumers order a tenant's changes by it, never by the clocks of billing's replicas.
   */
  planVersion?: number;
  subscriptionId: string | null;
  /** The payment provider's customer of this tenant (Stripe), made at its first checkout or portal visit. */
  providerCustomerId?: string | null;
  createdAt: string;
  updatedAt: string;
}

export type EntryKind = 'grant' | 'purchase' | 'gift_card' | 'usage' | 'adjustment';

/** An immutable ledger entry. `sourceKey` is unique: the same source (event, invoice, card) applies once. */
export interface EntryDoc {
  id: string;
  tenantId: string;
  sourceKey: string;
  kind: EntryKind;
  /** Signed: positive adds credits, negative spends them. */
  credits: number;
  description: string;
  createdAt: string;
  /** A usage entry's model call (absent on other kinds, and on usage entries of older versions). */
  usage?: EntryUsage;
  /** A usage entry's UTC hour (`createdAt` truncated, ISO): usage analytics read the ends of a window by it. */
  hour?: string;
}

/** What usage analytics group a model call's debit by (usage-analytics.ts); '' for none. */
export interface EntryUsage {
  /**
   * The model as the caller asked for it (a catalogue name, or the default model's name: CONTRACT.md 12); entries
   * of older versions have `provider/model`.
   */
  model: string;
  apiKeyId: string;
  projectId: string;
  agentId: string;
  inputTokens: number;
  outputTokens: number;
  /** Of `inputTokens`, those read from the provider's prompt cache (absent: none). */
  cachedInputTokens?: number;
  /** The provider that served, the catalogue entry that served ('' or absent: the default model) and its model id. */
  provider?: string;
  entryId?: string;
  servedModel?: string;
  /** The price applied, in credits per 1,000,000 tokens (absent on entries of older versions). */
  price?: { input: number; output: number; cachedInput: number; source: string };
}

export interface InvoiceDoc {
  id: string;
  tenantId: string;
  kind: 'credits' | 'subscription';
  description: string;
  amountCents: number;
  currency: string;
  /** open: waits for the provider's checkout; void: the checkout expired or failed. */
  status: 'open' | 'paid' | 'void';
  provider: string;
  /** The provider's reference (a Stripe checkout session id). */
  providerRef: string | null;
  credits: number;
  plan: string;
  createdAt: string;
  paidAt: string | null;
}

export interface SubscriptionDoc {
  id: string;
  tenantId: string;
  plan: string;
  /** `ended` when replaced by another subscription. */
  status: 'active' | 'pending' | 'ended';
  provider: string;
  invoiceId: string;
  currentPeriodStart: string;
  currentPeriodEnd: string;
  createdAt: string;
}

/** Gift cards are global (not per tenant): id = SHA-256 of the code, which is never stored. */
export interface GiftCardDoc {
  id: string;
  credits: number;
  expiresAt: string | null;
  status: 'active' | 'redeemed';
  redeemedBy: string | null;
  redeemedAt: string | null;
  createdAt: string;
}

/** Usage totals per tenant and credential or model, kept with the usage entries (the summary reads them). */
export interface UsageStatDoc {
  id: string;
  tenantId: string;
  group: 'credential' | 'model';
  key: string;
  kind: string;
  calls: number;
  inputTokens: number;
  outputTokens: number;
  credits: number;
  createdAt: string;
}

/** A model call's hold on credits (reservations.ts). */
export type ReservationStatus = 'open' | 'settled' | 'released' | 'expired';

export interface ReservationDoc {
  /** `<tenantId>:<callId>`: one reservation per call, whatever is retried. */
  id: string;
  tenantId: string;
  callId: string;
  credits: number;
  source: string;
  sourceId: string;
  status: ReservationStatus;
  /** How long the sweeper waits, on its own clock, before it expires the reservation. */
  ttlMs: number;
  /** The API key whose credit budget holds these credits too (absent: the call's key has no budget). */
  apiKeyId?: string;
  /** That key's budget at reserve time: its settle decides the key's alert crossings with it (alerts.ts). */
  keyBudget?: { credits: number; period: 'total' | 'month' };
  createdAt: string;
  closedAt: string | null;
}

export const reservations: CollectionDef<ReservationDoc> = {
  name: 'reservations',
  indexes: [{ fields: ['status'] }, { fields: ['tenantId', 'status'] }],
};

/** A slice of a tenant's available credits held for one chat process (escrows.ts). */
export interface EscrowDoc {
  /** `<tenantId>:esc:<request id>`: one escrow per grant request, whatever is retried. */
  id: string;
  tenantId: string;
  /** The holding process (random per process start). */
  holder: string;
  granted: number;
  /** What it still holds: granted, less the costs of its settled calls and what its holder gave back. */
  remaining: number;
  /** open: its holder carves from it; returned: closed by its holder, its calls still settling; closed, expired. */
  status: 'open' | 'returned' | 'closed' | 'expired';
  /** Moved by every renewal: billing's sweepers time the lease from the last beat they saw, on their own clocks. */
  beat: number;
  leaseMs: number;
  /** How long a carved call may run past the lease before its settle (the reservation TTL). */
  graceMs: number;
  createdAt: string;
  closedAt: string | null;
}

export const escrows: CollectionDef<EscrowDoc> = { name: 'escrows', indexes: [{ fields: ['status'] }] };

/** One per tenant, id = tenant id. */
export const accounts: CollectionDef<AccountDoc> = { name: 'accounts' };
export const ledger: CollectionDef<EntryDoc> = {
  name: 'ledger',
  indexes: [{ fields: ['sourceKey'], unique: true }, { fields: ['tenantId'] }, { fields: ['tenantId', 'hour'] }],
};
export const invoices: CollectionDef<InvoiceDoc> = {
  name: 'invoices',
  indexes: [{ fields: ['tenantId'] }, { fields: ['providerRef'] }],
};
export const subscriptions: CollectionDef<SubscriptionDoc> = {
  name: 'subscriptions',
  indexes: [{ fields: ['tenantId'] }, { fields: ['invoiceId'] }],
};
export const giftCards: CollectionDef<GiftCardDoc> = { name: 'gift_cards' };
export const usageStats: CollectionDef<UsageStatDoc> = { name: 'usage_stats', indexes: [{ fields: ['tenantId', 'group'] }] };

export const ALL_COLLECTIONS = [accounts, ledger, invoices, subscriptions, giftCards, usageStats, idempotency, reservations, escrows];
