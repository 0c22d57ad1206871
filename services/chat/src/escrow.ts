/**
 * This process's slices of tenants' credits (billing's escrows, docs/decisions.md "per-process credit escrow"): a
 * call's hold is carved from its tenant's slice in memory, with no round trip to billing; the call's `llm.usage`
 * names the escrow and billing takes the call's cost out of it. What no open call holds and no ended call spent is
 * given back when the tenant goes idle, when the slice runs short, and at stop.
 *
 * Exactness: a hold is carved only when the slice's free part covers it, free = granted - spent - returned - held
 * (`spent` is each ended call's cost, computed as billing computes it; a call whose end this process could not store
 * counts its whole hold, so nothing it may still be billed is given back). A hold is carved only while the lease is
 * valid on this process's monotonic clock, timed from when the grant or renewal was *sent*: billing, which times its
 * expiry from when it saw the renewal plus the longest a call may run, always ends it later.
 */
import { monotonicNow, type Logger } from '@svc/kit';
import { randomUUID } from 'node:crypto';

/** Billing's escrow calls, as chat makes them (contracts CreditReservations), with a token of the tenant. */
export interface EscrowBilling {
  grantEscrow(
    token: string,
    req: { requestId: string; holder: string; holdCredits: number },
  ): Promise<{ granted: boolean; escrowId: string; credits: number; leaseMs: number; available: number }>;
  renewEscrow(
    token: string,
    req: { escrowId: string; returnCredits: number; close: boolean },
  ): Promise<{ status: string; remaining: number; leaseMs: number; available: number }>;
}

export interface EscrowSettings {
  /** After this long with no call carved and none open, the slice goes back. */
  idleMs: number;
  /** After billing declined a slice (the balance is small), calls of the tenant reserve one by one this long. */
  declinedMs: number;
  /** How often the renewal loop looks (it renews each slice every third of its lease). */
  tickMs: number;
}

export const DEFAULT_ESCROW_SETTINGS: EscrowSettings = { idleMs: 2000, declinedMs: 1000, tickMs: 250 };

interface Slice {
  id: string;
  tenantId: string;
  granted: number;
  spent: number;
  returned: number;
  /** The holds of calls carved and not ended, by call id. */
  open: Map<string, number>;
  held: number;
  leaseMs: number;
  /** Carving allowed before this (monotonic, from the sending of the last grant or renewal that billing answered). */
  validUntil: number;
  renewedSentAt: number;
  lastUse: number;
  /** No more carving: given back once its open calls end. */
  draining: boolean;
  busy: boolean;
  /** A token of the tenant, from its latest call: the renewals are the tenant's own calls to billing. */
  token: string;
}

const free = (s: Slice) => s.granted - s.spent - s.returned - s.held;

export class CreditEscrow {
  /** The holder billing knows this process by: new at every start. */
  readonly holder = `chat-${randomUUID()}`;
  private readonly active = new Map<string, Slice>();
  private readonly draining = new Set<Slice>();
  /** Every slice not yet closed (active or draining), by escrow id: a call's end finds its slice at once. */
  private readonly byId = new Map<string, Slice>();
  private readonly granting = new Map<string, Promise<void>>();
  private readonly declinedUntil = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly billing: EscrowBilling,
    private readonly logger: Logger,
    private readonly settings: EscrowSettings = DEFAULT_ESCROW_SETTINGS,
    private readonly now: () => number = monotonicNow,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.tick(), this.settings.tickMs);
    this.timer.unref();
  }

  /**
   * Carves `credits` for call `callId` of the tenant from its slice (asking billing for one when it has none, once at
   * a time per tenant): the escrow's id, or null when the call must reserve on its own (no slice worth granting, or
   * billing not answering).
   */
  async carve(tenantId: string, token: string, callId: string, credits: number): Promise<string | null> {
    const carved = this.tryCarve(tenantId, token, callId, credits);
    if (carved || (this.declinedUntil.get(tenantId) ?? 0) > this.now()) return carved;
    let granting = this.granting.get(tenantId);
    if (!granting) {
      granting = this.grant(tenantId, token, credits).finally(() => this.granting.delete(tenantId));
      this.granting.set(tenantId, granting);
    }
    await granting;
    return this.tryCarve(tenantId, token, callId, credits);
  }

  /** A carved call ended: `cost` is what billing takes for it from the escrow, null when not known (its whole hold). */
  ended(escrowId: string, callId: string, cost: number | null): void {
    const s = this.sliceOf(escrowId);
    const hold = s?.open.get(callId);
    if (!s || hold === undefined) return;
    s.open.delete(callId);
    s.held -= hold;
    s.spent += cost === null ? hold : Math.max(0, cost);
    if (s.draining && s.open.size === 0) void this.renew(s);
  }

  /** Every slice's free part back to billing (at stop, after the replies ended). */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    for (const s of this.active.values()) this.drain(s);
    await Promise.all([...this.draining].map((s) => this.renew(s)));
  }

  /** What this process holds of a tenant, for tests and metrics. */
  sliceState(tenantId: string): { id: string; granted: number; free: number; held: number; spent: number; valid: boolean } | null {
    const s = this.active.get(tenantId);
    return s ? { id: s.id, granted: s.granted, free: free(s), held: s.held, spent: s.spent, valid: this.now() < s.validUntil } : null;
  }

  /** Renews what is due, gives back idle slices and closes drained ones. */
  async tick(): Promise<void> {
    const now = this.now();
    const due: Slice[] = [];
    for (const s of this.active.values()) {
      if (s.open.size === 0 && now - s.lastUse >= this.settings.idleMs) this.drain(s);
      else if (now - s.renewedSentAt >= s.leaseMs / 3) due.push(s);
    }
    for (const s of this.draining) if (s.open.size === 0 || now - s.renewedSentAt >= s.leaseMs / 3) due.push(s);
    await Promise.all(due.map((s) => this.renew(s)));
  }

  private tryCarve(tenantId: string, token: string, callId: string, credits: number): string | null {
    const s = this.active.get(tenantId);
    if (!s) return null;
    const now = this.now();
    if (now >= s.validUntil) return null;
    if (free(s) < Math.max(1, credits)) {
      // Short: it goes back once its calls end, and the next call asks for a new one.
      this.drain(s);
      return null;
    }
    s.open.set(callId, credits);
    s.held += credits;
    s.lastUse = now;
    s.token = token;
    return s.id;
  }

  private async grant(tenantId: string, token: string, holdCredits: number): Promise<void> {
    const sentAt = this.now();
    try {
      const g = await this.billing.grantEscrow(token, { requestId: randomUUID(), holder: this.holder, holdCredits });
      if (!g.granted) {
        this.declinedUntil.set(tenantId, this.now() + this.settings.declinedMs);
        return;
      }
      const slice: Slice = {
        id: g.escrowId,
        tenantId,
        granted: g.credits,
        spent: 0,
        returned: 0,
        open: new Map(),
        held: 0,
        leaseMs: g.leaseMs,
        validUntil: sentAt + g.leaseMs,
        renewedSentAt: sentAt,
        lastUse: this.now(),
        draining: false,
        busy: false,
        token,
      };
      const previous = this.active.get(tenantId);
      if (previous) this.drain(previous);
      this.active.set(tenantId, slice);
      this.byId.set(slice.id, slice);
    } catch (err) {
      // Billing not answering: the call reserves on its own (and is refused if that fails too).
      this.declinedUntil.set(tenantId, this.now() + this.settings.declinedMs);
      this.logger.warn({ err, tenantId }, 'no credit escrow granted; reserving per call');
    }
  }

  private drain(s: Slice): void {
    if (this.active.get(s.tenantId) === s) this.active.delete(s.tenantId);
    s.draining = true;
    s.validUntil = 0;
    this.draining.add(s);
  }

  private sliceOf(escrowId: string): Slice | undefined {
    return this.byId.get(escrowId);
  }

  /** One renewal at a time per slice; a drained slice with no open call gives back its free part and closes. */
  private async renew(s: Slice): Promise<void> {
    if (s.busy) return;
    s.busy = true;
    const close = s.draining && s.open.size === 0;
    const back = close ? Math.max(0, free(s)) : 0;
    const sentAt = this.now();
    try {
      const r = await this.billing.renewEscrow(s.token, { escrowId: s.id, returnCredits: back, close });
      s.returned += back;
      if (r.status !== 'open') {
        // Closed here, or by billing's expiry (it saw no renewal for the lease and every call's longest run).
        this.draining.delete(s);
        this.byId.delete(s.id);
        if (this.active.get(s.tenantId) === s) this.active.delete(s.tenantId);
        return;
      }
      s.renewedSentAt = sentAt;
      if (!s.draining) s.validUntil = sentAt + r.leaseMs;
      s.leaseMs = r.leaseMs;
      // The tenant's credit outside every escrow is smaller than this slice: it goes back, so a call that fits the
      // balance is not refused because slices hold it.
      if (!s.draining && r.available < s.granted) this.drain(s);
    } catch (err) {
      // Not renewed: the lease runs out on this process's clock first; the next tick tries again.
      this.logger.warn({ err, escrowId: s.id }, 'renewing a credit escrow failed; will retry');
    } finally {
      s.busy = false;
    }
  }
}
