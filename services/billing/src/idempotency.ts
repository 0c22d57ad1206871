/**
 * `Idempotency-Key` on the billing POSTs (CONTRACT.md 5): the same key with the same body within 24 h gets the same
 * answer and is charged once, also when two arrive at once and across a crash at any point. The same key with a
 * different body is a 409.
 *
 * - A key is claimed by inserting its record (unique id = hash of tenant, operation and key). A concurrent request
 *   waits for the holder's answer.
 * - The answer is recorded **in the work's own transaction** (`commit`): a crash after that commit leaves the answer
 *   to replay, a crash before it leaves nothing done. A refusal changes nothing, so it is recorded after.
 * - A claim whose holder is gone is taken over by the kit lease rule: at once when the holder was a process of this
 *   host that no longer exists, otherwise after its beat has stood still for `leaseMs` on the observer's own
 *   monotonic clock (no time written by one machine is compared with another's clock). A take-over bumps the
 *   claim's generation and the answer's commit is a compare-and-set on it, so of a holder wrongly judged gone and
 *   the one that took over, only one commits its work.
 */
import {
  AppError,
  DuplicateKeyError,
  errors,
  holderIsGone,
  holderStarted,
  LeaseWatch,
  monotonicNow,
  newHolderId,
  nowIso,
  sha256Hex,
  type Store,
  type StoreSession,
} from '@svc/kit';
import { idempotency, type IdempotencyDoc } from './collections';
import { applyOnce } from './ledger';

const TTL_MS = 24 * 3600 * 1000;
const POLL_MS = 50;

export interface IdempotencyTimings {
  /** How long a claim's beat must stand still, as this process sees it, before the claim is taken over. */
  leaseMs: number;
  /** How often a holder beats its claim while its work runs. */
  beatMs: number;
  /** How long a request waits for a concurrent holder's answer before it answers "in progress". */
  waitMs: number;
}

const TIMINGS: IdempotencyTimings = { leaseMs: 30_000, beatMs: 5_000, waitMs: 10_000 };

/** Runs the work's transaction and records its answer (`fn`'s result) in that same transaction. */
export type Commit<R> = (fn: (tx: StoreSession) => Promise<R>) => Promise<R>;

/** This process, as the holder of its claims (a restart is another holder; the old one is then gone). */
const HOLDER = newHolderId();
holderStarted(HOLDER);
/** What this process has seen of other holders' beats (kit lease rule). */
const WATCH = new LeaseWatch();

/** The claim was taken over while its work ran: the work's transaction is rolled back. */
class ClaimLost extends Error {}

export async function idempotent<R>(
  store: Store,
  scope: { tenantId: string; operation: string; key: string; body: unknown },
  work: (commit: Commit<R>) => Promise<R>,
  options: { watch?: LeaseWatch; timings?: Partial<IdempotencyTimings> } = {},
): Promise<R> {
  if (!scope.key) return work((fn) => applyOnce(store, fn));
  if (scope.key.length > 255) throw errors.validation([{ field: 'Idempotency-Key', message: 'must be at most 255 characters' }]);
  const timings = { ...TIMINGS, ...options.timings };
  const watch = options.watch ?? WATCH;
  const col = store.collection(idempotency);
  const id = sha256Hex(`${scope.tenantId}|${scope.operation}|${scope.key}`);
  const bodyHash = sha256Hex(JSON.stringify(scope.body));
  const deadline = monotonicNow() + timings.waitMs;
  for (;;) {
    const existing = await col.get(id);
    // The 24 h expiry is a wall time of whichever replica wrote it: skew of seconds does not matter at that scale.
    if (existing && existing.expiresAt > Date.now()) {
      if (existing.bodyHash !== bodyHash)
        throw errors.conflict('This Idempotency-Key was used with a different request', { reason: 'idempotency_key_reused' });
      if (existing.status === 'done') return replay<R>(existing);
      const beat = `${existing.gen ?? 0}:${existing.beat ?? 0}`;
      if (!holderIsGone(existing.holder ?? '') && !watch.stale(id, beat, timings.leaseMs)) {
        if (monotonicNow() > deadline)
          throw errors.conflict('A request with this Idempotency-Key is still in progress', { reason: 'idempotency_in_progress' });
        await new Promise((r) => setTimeout(r, POLL_MS));
        continue;
      }
    }
    // Claim it: a fresh insert, or a take-over of an expired record / an abandoned claim (compare-and-set on it).
    const claim: IdempotencyDoc = {
      id,
      tenantId: scope.tenantId,
      operation: scope.operation,
      bodyHash,
      status: 'pending',
      holder: HOLDER,
      gen: (existing?.gen ?? 0) + 1,
      beat: 0,
      response: null,
      createdAt: nowIso(),
      expiresAt: Date.now() + TTL_MS,
    };
    let claimed: IdempotencyDoc | null;
    try {
      claimed = existing
        ? await col.update(id, { status: existing.status, gen: existing.gen ?? null, beat: existing.beat ?? null }, claim)
        : await col.insert(claim);
    } catch (err) {
      if (err instanceof DuplicateKeyError) continue; // another request claimed it first: wait for its answer
      throw err;
    }
    if (!claimed) continue;
    watch.forget(id);
    const outcome = await hold(store, claim, work, timings.beatMs);
    if (outcome.lost) continue; // taken over while working: wait for the new holder's answer
    return outcome.result;
  }
}

/** Does the work under the claim, beating it meanwhile, and records the answer. */
async function hold<R>(
  store: Store,
  claim: IdempotencyDoc,
  work: (commit: Commit<R>) => Promise<R>,
  beatMs: number,
): Promise<{ lost: true } | { lost: false; result: R }> {
  const col = store.collection(idempotency);
  const mine = { status: 'pending' as const, gen: claim.gen };
  const answer = (saved: object) => ({ status: 'done' as const, response: JSON.stringify(saved) });
  const beat = setInterval(() => void col.increment(claim.id, mine, { beat: 1 }).catch(() => undefined), beatMs);
  beat.unref();
  let committed = false;
  const commit: Commit<R> = (fn) =>
    applyOnce(store, async (tx) => {
      const result = await fn(tx);
      // In the work's transaction: the work and its answer commit together, and only under our claim.
      if (!(await tx.collection(idempotency).update(claim.id, mine, answer({ ok: result })))) throw new ClaimLost();
      committed = true;
      return result;
    });
  try {
    const result = await work(commit);
    // Work that needed no transaction (none today) records its answer on its own.
    if (!committed && !(await col.update(claim.id, mine, answer({ ok: result })))) return { lost: true };
    return { lost: false, result };
  } catch (err) {
    if (err instanceof ClaimLost) return { lost: true };
    // A refusal is an answer too (the same request gets it again); anything else frees the key for a retry.
    if (err instanceof AppError && err.httpStatus < 500)
      await col.update(claim.id, mine, answer({ error: { code: err.code, message: err.message, details: err.details } }));
    else await col.delete(claim.id, mine);
    throw err;
  } finally {
    clearInterval(beat);
  }
}

function replay<R>(doc: IdempotencyDoc): R {
  const saved = JSON.parse(doc.response ?? '{}') as {
    ok?: R;
    error?: { code: AppError['code']; message: string; details: Record<string, unknown> };
  };
  if (saved.error) throw new AppError(saved.error.code, saved.error.message, saved.error.details);
  return saved.ok as R;
}
