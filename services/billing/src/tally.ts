/**
 * The counters a transaction's ledger entries move, summed per document: the account's balance, `reserved` and day
 * debits, each API key's usage document, the usage rollups and running totals. A batch of the bus's `llm.usage`
 * events (events.ts) writes each of them once or twice, not once per event: the account and a key's document after
 * the first event that moves them (`hold`: so the transaction holds them from its first event on, as event by event)
 * and once more with the rest at the end (`flush`, still in the transaction); the counters nothing else writes
 * (rollups, totals) once, at the end. A batch of 50 calls of one tenant, key and model: 2 writes of its account, 2 of
 * its key's, 4 counters; a lone event: 1 each.
 *
 * Exact as writing them entry by entry: the entries themselves (ledger, reservations, request log) are written at
 * once, so a redelivered event in the same batch still finds its entry and changes nothing, and a transaction run
 * again (applyOnce) starts a new tally; only sums wait, and every sum is an increment (`$inc`, never a value read and
 * written back). The thresholds (alerts.ts) are judged entry by entry as before: the flush takes the value before the
 * transaction as the value after it minus the transaction's moves, and walks the entries in their order from there,
 * so each crossing is the one entry-by-entry writes found, with the same `value` (the balance, day total or percent
 * just after its entry), on either store. The events of a transaction go to the outbox together at its end, the
 * account's crossings before the keys'.
 */
import { type Collection, type CollectionDef, nowIso, type StoreSession, type Where } from '@svc/kit';
import { alertsOf, entryCrossings, keySpendCrossings, type AlertsDoc } from './alerts';
import { accounts, reservations, type AccountDoc, type EntryKind } from './collections';
import { addToCounter } from './counters';
import { spentIn } from './key-budget';
import { keyUsage, keyUsageId, minuteOf, monthOf, newKeyUsage, type KeyUsageDoc } from './key-usage';

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

interface KeySpend {
  tokens: number;
  credits: number;
  /** The call, whose reservation held the key's budget (alerts.ts). */
  callId: string;
  /** Billing's clock at the spend: the minute and month it counts in. */
  at: number;
}

type Numbers = Record<string, number>;

/**
 * A document the transaction moves: as its last write left it (null: not written yet), what the transaction moved
 * in all, what is still to write, and the entries (spends) in order.
 */
interface Moved<D, M> {
  doc: D | null;
  total: Numbers;
  pending: Numbers;
  moves: M[];
}

interface Counter {
  def: CollectionDef<{ id: string }>;
  id: string;
  by: Numbers;
  fresh: () => { id: string };
}

/** Moves the document by the non-zero amounts of `by` (reads it when there are none); null when it does not exist. */
async function moved<T extends { id: string }>(col: Collection<T>, id: string, where: Where<T>, by: Numbers): Promise<T | null> {
  const some: Numbers = {};
  let any = false;
  for (const field in by)
    if (by[field] !== 0) {
      some[field] = by[field];
      any = true;
    }
  return any ? col.increment(id, where, some as Partial<Record<keyof T & string, number>>) : col.get(id, where);
}

function add(into: Numbers, by: Numbers): void {
  for (const field in by) into[field] = (into[field] ?? 0) + by[field];
}

const hasMoves = (by: Numbers) => Object.values(by).some((n) => n !== 0);

/** A move of the document: pending until written, and in the transaction's total. */
function add2(m: { total: Numbers; pending: Numbers }, by: Numbers): void {
  add(m.total, by);
  add(m.pending, by);
}

type KeyMoved = Moved<KeyUsageDoc, KeySpend> & { tenantId: string; keyId: string };

export class Tally {
  private readonly accounts = new Map<string, Moved<AccountDoc, EntryMove>>();
  private readonly keys = new Map<string, KeyMoved>();
  private readonly counters = new Map<string, Counter>();
  private readonly alerts = new Map<string, AlertsDoc | null>();
  private readonly balances = new Map<string, number>();

  constructor(readonly tx: StoreSession) {}

  /**
   * A ledger entry of `credits` (signed) moves the balance; a usage debit counts in the UTC day's debits. The
   * account is created on its first entry.
   */
  entry(tenantId: string, kind: EntryKind, credits: number, at = Date.now()): void {
    const debit = kind === 'usage' && credits < 0 ? -credits : 0;
    const m = this.account(tenantId);
    add2(m, { balance: credits, debitsOfDay: debit });
    m.moves.push({ kind, credits, at });
  }

  /** The account's open reservations moved by `credits` (signed); none when it has no account. */
  reserved(tenantId: string, credits: number): void {
    add2(this.account(tenantId), { reserved: credits });
  }

  /** The key's open reservations moved by `credits` (signed); none when it has no usage document. */
  keyReserved(tenantId: string, keyId: string, credits: number): void {
    add2(this.key(tenantId, keyId), { reserved: credits });
  }

  /** A model call's tokens and credits counted on its key (the rate window, the month, the total). */
  keySpend(tenantId: string, keyId: string, spend: Omit<KeySpend, 'at'>, at = Date.now()): void {
    const m = this.key(tenantId, keyId);
    add2(m, { minuteTokens: spend.tokens, monthCredits: spend.credits, totalCredits: spend.credits });
    m.moves.push({ ...spend, at });
  }

  /** addToCounter's move, summed with the others of the same document and written at the flush. */
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

  private account(tenantId: string): Moved<AccountDoc, EntryMove> {
    let m = this.accounts.get(tenantId);
    if (!m) this.accounts.set(tenantId, (m = { doc: null, total: {}, pending: {}, moves: [] }));
    return m;
  }

  private key(tenantId: string, keyId: string): KeyMoved {
    const id = keyUsageId(tenantId, keyId);
    let m = this.keys.get(id);
    if (!m) this.keys.set(id, (m = { tenantId, keyId, doc: null, total: {}, pending: {}, moves: [] }));
    return m;
  }

  /**
   * Between two events of a batch: writes what the event moved on an account or key document the transaction had
   * not written yet, so the transaction holds it from its first event on, as event by event (on MongoDB a
   * reservation of the tenant meanwhile meets this transaction's write and retries, rather than the whole batch
   * aborting at its end on the reservation's). Later moves of a held document wait for the flush.
   */
  async hold(): Promise<void> {
    for (const [tenantId, m] of this.accounts) if (!m.doc) await this.writeAccount(tenantId, m);
    for (const m of this.keys.values()) if (!m.doc) await this.writeKey(m);
  }

  /** Writes every sum, once per document, and the crossings they make; what was tallied is then cleared. */
  async flush(): Promise<void> {
    for (const [tenantId, m] of this.accounts) await this.flushAccount(tenantId, m);
    for (const m of this.keys.values()) await this.flushKey(m);
    for (const c of this.counters.values()) await addToCounter(this.tx.collection(c.def), c.id, c.by, c.fresh);
    this.accounts.clear();
    this.keys.clear();
    this.counters.clear();
  }

  /** The account moved by what is pending (write). */
  private writeAccount(tenantId: string, m: Moved<AccountDoc, EntryMove>): Promise<AccountDoc | null> {
    return this.write(this.tx.collection(accounts), tenantId, {}, m, () => newAccount(tenantId));
  }

  /** The key's usage document moved by what is pending (write), its windows those of its first spend when new. */
  private writeKey(m: KeyMoved): Promise<KeyUsageDoc | null> {
    const col = this.tx.collection(keyUsage);
    return this.write(col, keyUsageId(m.tenantId, m.keyId), { tenantId: m.tenantId }, m, () =>
      newKeyUsage(m.tenantId, m.keyId, m.moves[0].at),
    );
  }

  /**
   * The document moved by what is pending; created when an entry or a spend moves it (a reservation's move before
   * its creation in the transaction is none: no reservation of a document that did not exist). Null: no document,
   * nothing written.
   */
  private async write<D extends { id: string }, M>(
    col: Collection<D>,
    id: string,
    where: Where<D>,
    m: Moved<D, M>,
    fresh: () => D,
  ): Promise<D | null> {
    let doc = await moved(col, id, where, m.pending);
    if (!doc && m.moves.length > 0) {
      await col.insert(fresh());
      doc = await moved(col, id, where, { ...m.pending, reserved: 0 });
    }
    m.pending = {};
    m.doc = doc;
    return doc;
  }

  private async alertsOf(tenantId: string): Promise<AlertsDoc | null> {
    if (!this.alerts.has(tenantId)) this.alerts.set(tenantId, await alertsOf(this.tx, tenantId));
    return this.alerts.get(tenantId)!;
  }

  private async flushAccount(tenantId: string, m: Moved<AccountDoc, EntryMove>): Promise<void> {
    const col = this.tx.collection(accounts);
    const after = m.doc && !hasMoves(m.pending) ? m.doc : await this.writeAccount(tenantId, m);
    if (!after || m.moves.length === 0) return;
    this.balances.set(tenantId, after.balance);
    // The account before this transaction's moves, then each entry in turn, as entry-by-entry writes saw it.
    const debits = m.total.debitsOfDay ?? 0;
    let balance = after.balance - (m.total.balance ?? 0);
    let day = after.debitsDay;
    let ofDay = (after.debitsOfDay ?? 0) - debits;
    const alerts = await this.alertsOf(tenantId);
    for (const e of m.moves) {
      const before = balance;
      balance += e.credits;
      let dayBefore = 0;
      let dayAfter = 0;
      // The day's spend is its usage debits, as GET /billing/usage sums them (an operator's adjustment is not spend).
      if (e.kind === 'usage' && e.credits < 0) {
        const today = dayOf(e.at);
        dayBefore = day === today ? ofDay : 0;
        dayAfter = dayBefore - e.credits;
        day = today;
        ofDay = dayAfter;
      }
      if (alerts) await entryCrossings(this.tx, alerts, { before, balance, dayBefore, dayAfter });
    }
    // The increments added the debits to the stored day's total: set right when the day is another.
    if (debits > 0 && (after.debitsDay !== day || after.debitsOfDay !== ofDay))
      await col.update(tenantId, {}, { debitsDay: day, debitsOfDay: ofDay });
  }

  private async flushKey(m: KeyMoved): Promise<void> {
    const { tenantId, keyId } = m;
    const col = this.tx.collection(keyUsage);
    const id = keyUsageId(tenantId, keyId);
    const after = m.doc && !hasMoves(m.pending) ? m.doc : await this.writeKey(m);
    if (!after || m.moves.length === 0) return;
    // The document before this transaction's spends, then each spend in turn (key-usage.ts's windows).
    const doc: KeyUsageDoc = {
      ...after,
      minuteTokens: after.minuteTokens - (m.total.minuteTokens ?? 0),
      monthCredits: after.monthCredits - (m.total.monthCredits ?? 0),
      totalCredits: after.totalCredits - (m.total.totalCredits ?? 0),
    };
    const alerts = await this.alertsOf(tenantId);
    const percents = alerts?.keyBudgetPercents.length ? alerts.keyBudgetPercents : null;
    for (const s of m.moves) {
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
    // The increments added to the stored windows: set right when a window is another.
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
