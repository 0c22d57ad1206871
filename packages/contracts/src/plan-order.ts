/**
 * The order of a tenant's plan changes (`tenant.plan_changed`), one rule for every service that keeps a copy of the
 * plan (identity, regions). Billing numbers a tenant's changes with a version it increments in the transaction of
 * the change, so the version orders them whatever the clocks of billing's replicas say. A consumer keeps a change
 * only when it is newer than the one it holds; an event from a billing that did not number its changes (version 0)
 * is ordered by billing's time of the change, as before, and never against a version.
 */

/** What a consumer holds of the last change it applied (both absent before the first). */
export interface HeldPlanChange {
  version?: number;
  changedAt?: string;
}

export interface IncomingPlanChange {
  /** 0: not numbered. */
  version: number;
  changedAt: string;
}

export function planChangeIsNewer(held: HeldPlanChange, incoming: IncomingPlanChange): boolean {
  if (incoming.version > 0) return incoming.version > (held.version ?? 0);
  return incoming.changedAt > (held.changedAt ?? '');
}
