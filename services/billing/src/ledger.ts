/**
 * The credit ledger: immutable entries, each with a unique `sourceKey` (the event, card, invoice or request that
 * caused it), and a per-tenant account whose balance is the sum of the entries, moved with an increment in the same
 * transaction as the entry. So the balance is exact under concurrency on either store (no read-modify-write), an
 * entry applies once whatever is retried (the unique key), and the balance can be rebuilt from the entries.
 */
import { DuplicateKeyError, newId, nowIso, type Store, type StoreSession } from '@svc/kit';
import { accounts, ledger, type AccountDoc, type EntryDoc, type EntryKind, type EntryUsage } from './collections';
import { newAccount, Tally } from './tally';

export interface NewEntry {
  tenantId: string;
  sourceKey: string;
  kind: EntryKind;
  credits: number;
  description: string;
  /** A model call's debit: what usage analytics group it by. */
  usage?: EntryUsage;
}

/** The tenant's account, created on first use (plan `free`, balance 0). */
export async function accountOf(tx: StoreSession, tenantId: string): Promise<AccountDoc> {
  const col = tx.collection(accounts);
  return (await col.get(tenantId)) ?? col.insert(newAccount(tenantId));
}

/**
 * Adds an entry and moves the balance, in the caller's transaction. Returns null when an entry with this source
 * was already applied (nothing changes). A concurrent apply of the same source fails on the unique key: MongoDB
 * aborts the whole transaction, so callers run this through `applyOnce`, which retries and then finds it applied.
 */
export async function addEntry(tx: StoreSession, e: NewEntry): Promise<{ entry: EntryDoc; balance: number } | null> {
  const tally = new Tally(tx);
  const entry = await tallyEntry(tally, e);
  if (!entry) return null;
  await tally.flush();
  return { entry, balance: tally.balance(e.tenantId)! };
}

/**
 * addEntry with the balance moved in `tally` (tally.ts: with the transaction's other entries, flushed by the caller):
 * the entry itself is written at once, so a second entry of its source in the same transaction finds it.
 */
export async function tallyEntry(tally: Tally, e: NewEntry): Promise<EntryDoc | null> {
  const col = tally.tx.collection(ledger);
  if (await col.findOne({ sourceKey: e.sourceKey })) return null;
  const createdAt = nowIso();
  // A usage entry is stamped with its hour from the same clock reading as createdAt: its rollups (usage-analytics.ts)
  // and the window ends read from the ledger put it in the same bucket.
  const hour = e.usage ? `${createdAt.slice(0, 13)}:00:00.000Z` : undefined;
  const entry = await col.insert({ id: newId('cre'), ...e, ...(hour ? { hour } : {}), createdAt });
  // The account is created on its first entry.
  tally.entry(e.tenantId, e.kind, e.credits);
  return entry;
}

/** Runs `fn` in a transaction, again when a concurrent writer won a unique key (it then sees that writer's work). */
export async function applyOnce<R>(store: Store, fn: (tx: StoreSession) => Promise<R>, attempts = 4): Promise<R> {
  for (let i = 1; ; i++) {
    try {
      return await store.transaction(fn);
    } catch (err) {
      if (!(err instanceof DuplicateKeyError) || i >= attempts) throw err;
    }
  }
}

/** Sum of a tenant's entries: what the stored balance must equal (rebuild and audit). */
export async function rebuildBalance(store: Store, tenantId: string): Promise<number> {
  let sum = 0;
  let cursor: string | null = null;
  do {
    const page = await store.collection(ledger).find({ tenantId }, { limit: 500, cursor, order: 'asc' });
    for (const e of page.items) sum += e.credits;
    cursor = page.nextCursor;
  } while (cursor);
  return sum;
}

/** Credits of one model call: CREDITS_PER_1K_TOKENS per 1,000 tokens (input + output), rounded up per call. */
export function usageCredits(inputTokens: number, outputTokens: number, per1k: number): number {
  const tokens = Math.max(0, inputTokens) + Math.max(0, outputTokens);
  return Math.ceil((tokens * per1k) / 1000);
}
