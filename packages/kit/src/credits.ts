import { billingV1 } from '@svc/proto';
import { AppError } from './errors';
import { createClient, type ServiceClient } from './grpc/client';
import type { Logger } from './logger';

/**
 * The spendable-credits check of agents and chat (CONTRACT.md 5: 402 INSUFFICIENT_CREDITS at a balance of 0 or
 * less, after validation). The balance is billing's; this keeps each tenant's last answer for `ttlMs` and refreshes
 * it in the background, so a request pays a map lookup, not a call (the first request of a tenant in a process
 * pays one call). What it cannot see: debits of the last `ttlMs` (plus the ledger's own 2 s), so a tenant at the
 * edge may start calls for that long after its balance reached 0. When billing does not answer, the last known
 * balance decides, and a tenant never seen is let through (billing down must not stop every model call).
 */
export class CreditGate {
  private readonly known = new Map<string, { balance: number; at: number; refreshing: boolean }>();
  private readonly client: ServiceClient<typeof billingV1.BillingServiceService>;

  constructor(
    address: string,
    private readonly logger: Logger,
    private readonly ttlMs = 1000,
    deadlineMs = 1000,
  ) {
    this.client = createClient(billingV1.BillingServiceService, address, { deadlineMs });
  }

  async assertSpendable(tenantId: string, token: string): Promise<void> {
    const entry = this.known.get(tenantId);
    let balance: number | null = entry?.balance ?? null;
    const stale = !entry || Date.now() - entry.at > this.ttlMs;
    // A refusal is always decided on a fresh balance (a tenant that just bought credits is never refused), and so
    // is a tenant's first call; a stale positive balance lets this call through while it is refreshed.
    if (!entry || (stale && entry.balance <= 0)) balance = await this.fetch(tenantId, token);
    else if (stale && !entry.refreshing) {
      entry.refreshing = true;
      void this.fetch(tenantId, token).finally(() => (entry.refreshing = false));
    }
    if (balance !== null && balance <= 0)
      throw new AppError('INSUFFICIENT_CREDITS', 'No credits left: buy credits or redeem a gift card', { balance });
  }

  private async fetch(tenantId: string, token: string): Promise<number | null> {
    try {
      const { balance } = await this.client.getBalance({}, { token });
      if (this.known.size >= 100_000) this.known.clear();
      this.known.set(tenantId, { balance, at: Date.now(), refreshing: false });
      return balance;
    } catch (err) {
      this.logger.warn({ err: (err as Error).message, tenantId }, 'credit check: billing did not answer; letting the call through');
      return this.known.get(tenantId)?.balance ?? null;
    }
  }

  close(): void {
    this.client.close();
  }
}
