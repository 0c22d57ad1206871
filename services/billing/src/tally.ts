/**
 * The counters a transaction's ledger entries move, summed per document and written once when the transaction's
 * work is done (`flush`, still inside the transaction): the account's balance, `reserved` and day debits, each API
 * key's usage document, the usage rollups and running totals. A batch of the bus's `llm.usage` events (events.ts)
 * moves each of them once, not once per event: a batch of 50 calls of one tenant, key and model writes its account,
 * its key's document and its four usage counters once each.
 *
 * Exact as writing them entry by entry: the entries themselves (ledger, reservations, request log) are written at
 * once, so a redelivered event in the same batch still finds its entry and changes nothing; only sums wait, and a
 * sum is an increment (`$inc`, never a value read and written back). The thresholds (alerts.ts) are judged entry by
 * entry as before: the flush moves the document, takes the value before the transaction as the value after minus
 * the transaction's moves, and walks the entries in their order from there, so each crossing is the one entry-by-entry
 * writes would have found, with the same `value` (the balance, day total or percent just after its entry). The events
 * of a transaction go to the outbox together at its end, the account's crossings before the keys'.
 */
import { type Collection, type CollectionDef, nowIso, type StoreSession, type Where } from '@svc/kit';
import { alertsOf, entryCrossings, keySpendCrossings, type AlertsDoc } from './alerts';
import { accounts, reservations, type AccountDoc, type EntryKind } from './collections';
import { addToCounter } from './counters';
import { spentIn } from './key-budget';
import { keyUsage, keyUsageId, minuteOf, monthOf, type KeyUsageDoc } from './key-usage';

const dayOf = (ms: number) => new Date(ms).toISOString().slice(0, 10);

/** A new tenant's account (plan `free`, balance 0). */
export function newAccount(tenantId: string): AccountDoc {
  const now = nowIso();
  return { id: tenantId, tenantId, balance: 0, plan: 'free', planChangedAt: '', subscriptionId: null, createdAt: now, updatedAt: now };
}

interface EntryMove {
  kind: EntryKind;
  credits: number;
  /** Billing's clock at the entry: the UTC day its debit counts in. */
  at: number;
}

interface AccountMoves {
  reserved: number;
  entries: EntryMove[];
}

interface KeySpend {
  tokens: number;
  credits: number;
  /** The call, whose reservation held the key's budget (alerts.ts). */
  callId: string;
  /** Billing's clock at the spend: the minute and month it counts in. */
  at: number;
}

interface KeyMoves {
  tenantId: string;
  keyId: string;
  reserved: number;
  spends: KeySpend[];
}

type Numbers = Record<string, number>;

interface Counter {
  def: CollectionDef<{ id: string }>;
  id: string;
  by: Numbers;
  fresh: () => { id: string };
}

/** Moves the document by the non-zero amounts of `by` (reads it when there are none); null when it does not exist. */
async function moved<T extends { id: string }>(col: Collection<T>, id: string, where: Where<T>, by: Numbers): Promise<T | null> {
  const some = Object.fromEntries(Object.entries(by).filter(([, n]) => n !== 0));
  return Object.keys(some).length ? col.increment(id, where, some as Partial<Record<keyof T & string, number>>) : col.get(id, where);
}

function add(into: Numbers, by: Numbers): void {
  for (const [field, n] of Object.entries(by)) into[field] = (into[field] ?? 0) + n;
}

export class Tally {
  private readonly accountMoves = new Map<string, AccountMoves>();
  private readonly keyMoves = new Map<string, KeyMoves>();
  private readonly counters = new Map<string, Counter>();
  private readonly alerts = new Map<string, AlertsDoc | null>();
  private readonly balances = new Map<string, number>();

  constructor(readonly tx: StoreSession) {}

  private account(tenantId: string): AccountMoves {
    let moves = this.accountMoves.get(tenantId);
    if (!moves) this.accountMoves.set(tenantId, (moves = { reserved: 0, entries: [] }));
    return moves;
  }

  private key(tenantId: string, keyId: string): KeyMoves {
    const id = keyUsageId(tenantId, keyId);
    let moves = this.keyMoves.get(id);
    if (!moves) this.keyMoves.set(id, (moves = { tenantId, keyId, reserved: 0, spends: [] }));
    return moves;
  }

  /** A ledger entry of `credits` (signed) moves the balance; a usage debit counts in the UTC day's debits. */
  entry(tenantId: string, kind: EntryKind, credits: number, at = Date.now()): void {
    this.account(tenantId).entries.push({ kind, credits, at });
  }

  /** The account's open reservations moved by `credits` (signed). */
  reserved(tenantId: string, credits: number): void {
    this.account(tenantId).reserved += credits;
  }

  /** The key's open reservations moved by `credits` (signed). */
  keyReserved(tenantId: string, keyId: string, credits: number): void {
    this.key(tenantId, keyId).reserved += credits;
  }

  /** A model call's tokens and credits counted on its key (the rate window, the month, the total). */
  keySpend(tenantId: string, keyId: string, spend: Omit<KeySpend, 'at'>, at = Date.now()): void {
    this.key(tenantId, keyId).spends.push({ ...spend, at });
  }

  /** addToCounter's move, summed with the others of the same document. */
  count<T extends { id: string }>(def: CollectionDef<T>, id: string, by: Partial<Record<keyof T & string, number>>, fresh: () => T): void {
    const key = `${def.name}\n${id}`;
    let counter = this.counters.get(key);
    if (!counter)
      this.counters.set(key, (counter = { def: def as unknown as Counter['def'], id, by: {}, fresh: fresh as Counter['fresh'] }));
    add(counter.by, by as Numbers);
  }

  /** The tenant's balance as the flush left it (undefined: no entry of the tenant was flushed). */
  balance(tenantId: string): number | undefined {
    return this.balances.get(tenantId);
  }

  /** Writes every sum, once per document, and the crossings they make; what was tallied is then cleared. */
  async flush(): Promise<void> {
    for (const [tenantId, moves] of this.accountMoves) await this.flushAccount(tenantId, moves);
    for (const moves of this.keyMoves.values()) await this.flushKey(moves);
    for (const c of this.counters.values()) await addToCounter(this.tx.collection(c.def), c.id, c.by, c.fresh);
    this.accountMoves.clear();
    this.keyMoves.clear();
    this.counters.clear();
  }

  private async alertsOf(tenantId: string): Promise<AlertsDoc | null> {
    if (!this.alerts.has(tenantId)) this.alerts.set(tenantId, await alertsOf(this.tx, tenantId));
    return this.alerts.get(tenantId)!;
  }

  private async flushAccount(tenantId: string, moves: AccountMoves): Promise<void> {
    const col = this.tx.collection(accounts);
    // The day's spend is its usage debits, as GET /billing/usage sums them (an operator's adjustment is not spend).
    const debit = (e: EntryMove) => (e.kind === 'usage' && e.credits < 0 ? -e.credits : 0);
    const by = {
      balance: moves.entries.reduce((sum, e) => sum + e.credits, 0),
      reserved: moves.reserved,
      debitsOfDay: moves.entries.reduce((sum, e) => sum + debit(e), 0),
    };
    let after = await moved(col, tenantId, {}, by);
    if (!after) {
      if (moves.entries.length === 0) return; // no account, nothing to count on (as an increment of none)
      // Created on its first entry; the reservations of an account that did not exist were none.
      await col.insert(newAccount(tenantId));
      by.reserved = 0;
      after = (await moved(col, tenantId, {}, by))!;
    }
    if (moves.entries.length === 0) return;
    this.balances.set(tenantId, after.balance);
    // The account before this transaction's moves, then each entry in turn, as entry-by-entry writes saw it.
    let balance = after.balance - by.balance;
    let day = after.debitsDay;
    let ofDay = (after.debitsOfDay ?? 0) - by.debitsOfDay;
    const alerts = await this.alertsOf(tenantId);
    for (const e of moves.entries) {
      const before = balance;
      balance += e.credits;
      let dayBefore = 0;
      let dayAfter = 0;
      if (debit(e) > 0) {
        const today = dayOf(e.at);
        dayBefore = day === today ? ofDay : 0;
        dayAfter = dayBefore + debit(e);
        day = today;
        ofDay = dayAfter;
      }
      if (alerts) await entryCrossings(this.tx, alerts, { before, balance, dayBefore, dayAfter });
    }
    // The increment added the debits to the stored day's total: set right when the day is another.
    if (by.debitsOfDay > 0 && (after.debitsDay !== day || after.debitsOfDay !== ofDay))
      await col.update(tenantId, {}, { debitsDay: day, debitsOfDay: ofDay });
  }

  private async flushKey(moves: KeyMoves): Promise<void> {
    const { tenantId, keyId, spends } = moves;
    const col = this.tx.collection(keyUsage);
    const id = keyUsageId(tenantId, keyId);
    const tokens = spends.reduce((sum, s) => sum + s.tokens, 0);
    const credits = spends.reduce((sum, s) => sum + s.credits, 0);
    const by = { reserved: moves.reserved, minuteTokens: tokens, monthCredits: credits, totalCredits: credits };
    let after = await moved(col, id, { tenantId }, by);
    if (!after) {
      if (spends.length === 0) return; // no document: no reservation of the key to give back
      const at = spends[0].at;
      const fresh: KeyUsageDoc = {
        id,
        tenantId,
        minute: minuteOf(at),
        minuteTokens: 0,
        month: monthOf(at),
        monthCredits: 0,
        totalCredits: 0,
        reserved: 0,
        createdAt: nowIso(),
      };
      await col.insert(fresh);
      by.reserved = 0;
      after = (await moved(col, id, { tenantId }, by))!;
    }
    if (spends.length === 0) return;
    // The document before this transaction's spends, then each spend in turn (key-usage.ts's windows).
    const doc: KeyUsageDoc = {
      ...after,
      minuteTokens: after.minuteTokens - tokens,
      monthCredits: after.monthCredits - credits,
      totalCredits: after.totalCredits - credits,
    };
    const alerts = await this.alertsOf(tenantId);
    const percents = alerts?.keyBudgetPercents.length ? alerts.keyBudgetPercents : null;
    for (const s of spends) {
      const minute = minuteOf(s.at);
      const month = monthOf(s.at);
      doc.minuteTokens = (doc.minute === minute ? doc.minuteTokens : 0) + s.tokens;
      doc.minute = minute;
      doc.monthCredits = (doc.month === month ? doc.monthCredits : 0) + s.credits;
      doc.month = month;
      doc.totalCredits += s.credits;
      if (!percents || !s.callId || s.credits <= 0) continue;
      // The budget the call's reservation held (identity's, read at reserve time); none: nothing to cross.
      const reservation = await this.tx.collection(reservations).get(`${tenantId}:${s.callId}`);
      const budget = reservation?.apiKeyId === keyId ? reservation.keyBudget : undefined;
      if (!budget || budget.credits <= 0) continue;
      const spentAfter = spentIn(doc, budget.period, s.at);
      await keySpendCrossings(this.tx, tenantId, keyId, percents, budget.credits, spentAfter - s.credits, spentAfter);
    }
    // The increment added to the stored windows: set right when a window is another.
    if (
      after.minute !== doc.minute ||
      after.minuteTokens !== doc.minuteTokens ||
      after.month !== doc.month ||
      after.monthCredits !== doc.monthCredits
    )
      await col.update(
        id,
        { tenantId },
        { minute: doc.minute, minuteTokens: doc.minuteTokens, month: doc.month, monthCredits: doc.monthCredits },
      );
  }
}
