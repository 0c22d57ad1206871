/** The billing service's handlers, by what they serve (as identity's are). */
import { ledgerHandlers } from './ledger';
import { operatorHandlers } from './operator';
import { purchaseHandlers } from './purchases';
import { reservationHandlers } from './reservations';
import { billingParts, type BillingDeps } from './shared';

export type { BillingDeps } from './shared';

export function billingHandlers(deps: BillingDeps) {
  const parts = billingParts(deps);
  return {
    ...ledgerHandlers(deps, parts),
    ...reservationHandlers(deps, parts),
    ...purchaseHandlers(deps, parts),
    ...operatorHandlers(deps, parts),
  };
}
