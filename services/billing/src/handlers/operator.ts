import { randomBytes } from 'node:crypto';
import { addToOutbox, type CallContext, errors, newId, nowIso, randomBase62, sha256Hex } from '@svc/kit';
import { domainEvent, TOPICS } from '@svc/contracts';
import { isPlan } from '@svc/plans';
import type { billingV1 } from '@svc/proto';
import { accounts, giftCards } from '../collections';
import { accountOf, addEntry, applyOnce } from '../ledger';
import { type BillingDeps, type BillingParts, MAX_CREDITS } from './shared';

/** The operator's calls (SVC_ADMIN_TOKEN): gift cards minted, a tenant's plan set, credits adjusted. */
export function operatorHandlers(deps: BillingDeps, parts: BillingParts) {
  const { store, relay } = deps;
  const { adminOnly, knownTenant, positiveCredits, changePlan } = parts;

  return {
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
