/**
 * Billing alerts (CONTRACT.md 8): a tenant's thresholds, and the `billing.threshold_crossed` event a change emits
 * when it moves a value past one of them: the balance from `>= X` to `< X`, an API key's spend in its budget's period
 * to `>= p %` of its budget, a UTC day's debits to `> N`.
 *
 * Exactly one event per crossing, with any number of replicas: a crossing is decided from the value before and
 * after the change, in the transaction that makes the change (the ledger entry's), and its event goes to the outbox
 * in that transaction. The values are counters every change of them serialises on (the account's balance and day
 * debits, the key's usage document), so of concurrent changes exactly one sees a given crossing, and a change that
 * rolls back (a retried transaction) emits nothing. A transaction of many entries (a batch of usage events) writes
 * each value once and still judges its entries one by one, in order (tally.ts). The armed state is the value itself: a value back on the
 * threshold's safe side (the balance risen to X again, a new UTC day or month) is armed again, with nothing else to
 * reset, and a threshold already passed when it is set fires on the next crossing, not at once.
 */
import {
  addToOutbox,
  DuplicateKeyError,
  type CallContext,
  type CollectionDef,
  errors,
  type FieldError,
  nowIso,
  type Store,
  type StoreSession,
} from '@svc/kit';
import { domainEvent, TOPICS, authed } from '@svc/contracts';
import type { billingV1 } from '@svc/proto';
import { toBillingAlerts } from './views';

export const THRESHOLD_CROSSED = 'billing.threshold_crossed';

/** One per tenant (id = tenant id); no document: no alerts. */
export interface AlertsDoc {
  id: string;
  tenantId: string;
  balanceBelow: number | null;
  keyBudgetPercents: number[];
  dailyCreditsAbove: number | null;
  updatedAt: string;
}

export const billingAlerts: CollectionDef<AlertsDoc> = { name: 'billing_alerts' };

const MAX_CREDITS = 1_000_000_000_000;
export const MAX_KEY_BUDGET_PERCENTS = 10;

type Kind = 'balance_below' | 'key_budget' | 'daily_credits';

async function crossed(tx: StoreSession, tenantId: string, kind: Kind, threshold: number, value: number, apiKeyId = ''): Promise<void> {
  await addToOutbox(
    tx,
    domainEvent(TOPICS.billing, THRESHOLD_CROSSED, tenantId, { $case: 'thresholdCrossed', value: { kind, threshold, value, apiKeyId } }),
  );
}

/** The tenant's thresholds, in the transaction that moves the values (null: it has none). */
export async function alertsOf(tx: StoreSession, tenantId: string): Promise<AlertsDoc | null> {
  return tx.collection(billingAlerts).get(tenantId);
}

/**
 * In a ledger entry's transaction (tally.ts), for that entry: it moved the balance from `before` to `balance`, and
 * (a usage debit) the UTC day's debits from `dayBefore` to `dayAfter` (both 0 for other entries). Emits the balance and
 * day crossings it makes.
 */
export async function entryCrossings(
  tx: StoreSession,
  alerts: AlertsDoc,
  move: { before: number; balance: number; dayBefore: number; dayAfter: number },
): Promise<void> {
  const { before, balance, dayBefore, dayAfter } = move;
  const { tenantId } = alerts;
  if (alerts.balanceBelow !== null && before >= alerts.balanceBelow && balance < alerts.balanceBelow)
    await crossed(tx, tenantId, 'balance_below', alerts.balanceBelow, balance);
  if (alerts.dailyCreditsAbove !== null && dayBefore <= alerts.dailyCreditsAbove && dayAfter > alerts.dailyCreditsAbove)
    await crossed(tx, tenantId, 'daily_credits', alerts.dailyCreditsAbove, dayAfter);
}

/**
 * In a usage entry's transaction (tally.ts), for that call: its credits moved the key's spend in its budget's period
 * from `before` to `after`. Emits the key budget percents it crossed. The budget is the one the call's reservation
 * held (identity's, read at reserve time: billing does not ask identity while it applies usage); a call without a
 * reservation or whose key had no budget crosses nothing (the caller does not ask).
 */
export async function keySpendCrossings(
  tx: StoreSession,
  tenantId: string,
  keyId: string,
  percents: number[],
  budget: number,
  before: number,
  after: number,
): Promise<void> {
  // p % reached: spent * 100 >= p * budget, in integers (no rounding at the edge).
  for (const p of [...percents].sort((a, b) => a - b))
    if (before * 100 < p * budget && after * 100 >= p * budget)
      await crossed(tx, tenantId, 'key_budget', p, Math.floor((after * 100) / budget), keyId);
}

export interface AlertsInput {
  balanceBelow?: number | null;
  keyBudgetPercents?: number[];
  dailyCreditsAbove?: number | null;
}

/** The problems of a PUT's body, field by field (empty: valid). */
export function alertsProblems(input: AlertsInput): FieldError[] {
  const problems: FieldError[] = [];
  const credits = (field: 'balanceBelow' | 'dailyCreditsAbove') => {
    const v = input[field];
    if (v !== undefined && v !== null && (!Number.isInteger(v) || v < 0 || v > MAX_CREDITS))
      problems.push({ field, message: `must be an integer from 0 to ${MAX_CREDITS}` });
  };
  credits('balanceBelow');
  credits('dailyCreditsAbove');
  const percents = input.keyBudgetPercents ?? [];
  if (percents.length > MAX_KEY_BUDGET_PERCENTS)
    problems.push({ field: 'keyBudgetPercents', message: `at most ${MAX_KEY_BUDGET_PERCENTS} percents` });
  percents.forEach((p, i) => {
    if (!Number.isInteger(p) || p < 1 || p > 100)
      problems.push({ field: `keyBudgetPercents[${i}]`, message: 'must be an integer from 1 to 100' });
    else if (percents.indexOf(p) !== i) problems.push({ field: `keyBudgetPercents[${i}]`, message: 'is a duplicate' });
  });
  return problems;
}

/** Owner or admin only; an API key needs the scope too (the gateway checks both first; this is the service's own rule). */
function manager(ctx: CallContext, scope: 'billing:read' | 'billing:write') {
  const { auth } = authed(ctx, scope);
  if (auth.role !== 'owner' && auth.role !== 'admin')
    throw errors.forbidden('This needs the owner or admin role', { reason: 'role_required', requiredRoles: ['owner', 'admin'] });
  return auth;
}

export function alertsHandlers(store: Store) {
  return {
    async getAlerts(_req: billingV1.GetAlertsRequest, ctx: CallContext): Promise<billingV1.GetAlertsResponse> {
      const auth = manager(ctx, 'billing:read');
      return { alerts: toBillingAlerts(await store.collection(billingAlerts).get(auth.tid)) };
    },

    async putAlerts(req: billingV1.PutAlertsRequest, ctx: CallContext): Promise<billingV1.PutAlertsResponse> {
      const auth = manager(ctx, 'billing:write');
      const input = req.alerts ?? { keyBudgetPercents: [] };
      const problems = alertsProblems(input);
      if (problems.length) throw errors.validation(problems);
      const fields = {
        balanceBelow: input.balanceBelow ?? null,
        keyBudgetPercents: [...input.keyBudgetPercents],
        dailyCreditsAbove: input.dailyCreditsAbove ?? null,
        updatedAt: nowIso(),
      };
      // Replaces the thresholds; the values they watch are the ledger's, so nothing else to reset.
      for (let attempt = 1; ; attempt++) {
        try {
          const doc = await store.transaction(async (tx) => {
            const col = tx.collection(billingAlerts);
            if (await col.get(auth.tid)) return col.update(auth.tid, {}, fields);
            return col.insert({ id: auth.tid, tenantId: auth.tid, ...fields });
          });
          return { alerts: toBillingAlerts(doc) };
        } catch (err) {
          // Two first PUTs raced on the insert: the loser replaces the winner's.
          if (!(err instanceof DuplicateKeyError) || attempt >= 3) throw err;
        }
      }
    },
  };
}
