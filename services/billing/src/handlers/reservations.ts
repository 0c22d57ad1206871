import { type CallContext, errors, GroupCommit } from '@svc/kit';
import { authed } from '@svc/contracts';
import type { billingV1 } from '@svc/proto';
import { DEFAULT_ESCROW_POLICY, grantEscrow, renewEscrow, validGrant } from '../escrows';
import { closeReservation, reserve, validReserve } from '../reservations';
import { type BillingDeps, type BillingParts } from './shared';

/** Holds for model calls (CONTRACT.md 8): reserved before a call, released when it never started. */
export function reservationHandlers(deps: BillingDeps, parts: BillingParts) {
  const { store } = deps;
  const { openedAccount, callerKeyBudget } = parts;
  // Under load the reservations of one turn share a commit (a call's hold is its own transaction otherwise).
  const batch = new GroupCommit(store);

  return {
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
      const { doc, credits } = await reserve(store, { ...input, keyBudget }, deps.creditsPer1kTokens ?? 1, openedAccount, batch);
      return { reservationId: doc.id, credits: doc.credits, available: credits.available, status: doc.status };
    },

    /** A slice of the tenant's available credits for one chat process (escrows.ts), when the balance makes it worth one. */
    async grantEscrow(req: billingV1.GrantEscrowRequest, ctx: CallContext): Promise<billingV1.GrantEscrowResponse> {
      const { auth } = authed(ctx);
      const input = { tenantId: auth.tid, requestId: req.requestId, holder: req.holder, holdCredits: req.holdCredits };
      const problem = validGrant(input);
      if (problem) throw errors.validation([{ field: problem.split(' ')[0], message: problem }]);
      await openedAccount(auth.tid);
      const policy = deps.escrowPolicy ?? { ...DEFAULT_ESCROW_POLICY, graceMs: deps.reservationTtlMs ?? DEFAULT_ESCROW_POLICY.graceMs };
      const grant = await grantEscrow(store, input, policy);
      const e = grant.escrow;
      return {
        granted: grant.granted,
        escrowId: e?.id ?? '',
        credits: e?.granted ?? 0,
        leaseMs: e?.leaseMs ?? 0,
        available: grant.available,
      };
    },

    async renewEscrow(req: billingV1.RenewEscrowRequest, ctx: CallContext): Promise<billingV1.RenewEscrowResponse> {
      const { auth } = authed(ctx);
      if (!req.escrowId) throw errors.validation([{ field: 'escrowId', message: 'is required' }]);
      const input = { tenantId: auth.tid, id: req.escrowId, returnCredits: req.returnCredits, close: req.close };
      const { escrow, available } = await renewEscrow(store, input);
      return { status: escrow.status, remaining: escrow.remaining, leaseMs: escrow.leaseMs, available };
    },

    async release(req: billingV1.ReleaseRequest, ctx: CallContext): Promise<billingV1.ReleaseResponse> {
      const { auth } = authed(ctx);
      if (!req.callId) throw errors.validation([{ field: 'callId', message: 'is required' }]);
      const closed = await store.transaction((tx) => closeReservation(tx, auth.tid, req.callId, 'released'));
      return { released: closed !== null };
    },
  };
}
