/**
 * `Idempotency-Key` inside a service (CONTRACT.md 14): the same key with the same request within 24 h gets the same
 * answer and the work is done once, also when two arrive at once and across a crash at any point. The same key with
 * a different request is a 422 `idempotency_key_reused`. The gateway claims every POST's key in its own shared store
 * and replays the HTTP answer; this is the layer under it that makes a crash between the work's commit and that
 * answer harmless (the retry reaches the service, which finds the answer it committed with its work).
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
import { sha256Hex } from './crypto';
import { AppError, errors } from './errors';
import { holderIsGone, holderStarted, LeaseWatch, monotonicNow, newHolderId } from './lease';
import type { Logger } from './logger';
import { DuplicateKeyError, type CollectionDef, type Store, type StoreSession } from './storage';
import { Retention } from './storage/retention';
import { nowIso } from './ids';

/** An Idempotency-Key's claim and, once done, the answer given (id = hash of tenant, operation and key). */
export interface IdempotencyDoc {
  id: string;
  tenantId: string;
  operation: string;
  bodyHash: string;
  /** `done` is written in the transaction of the work it answers (or, for a refusal, after it). */
  status: 'pending' | 'done';
  /** The claiming process (kit newHolderId): a claim of a process gone from this host is taken over at once. */
  holder?: string;
  /** Bumped by every take-over; the answer's commit is a compare-and-set on it (absent on claims of older versions). */
  gen?: number;
  /** Bumped by the holder while it works: others take the claim over after seeing it still for the lease's length. */
  beat?: number;
  response: string | null;
  createdAt: string;
  /** Wall-clock ms after which the key may be used afresh (24 h). */
  expiresAt: number;
}

/** Every service's keys and answers (ensured by openRuntime, like the outbox); swept by `createdAt` after 24 h. */
export const idempotency: CollectionDef<IdempotencyDoc> = { name: 'idempotency', indexes: [{ fields: [] }] };

/** The refusals of CONTRACT.md 14, shared by the gateway's claims and the services' own. */
export const idempotencyErrors = {
  reused: () =>
    new AppError('UNPROCESSABLE_ENTITY', 'This Idempotency-Key was used with a different request', {
      reason: 'idempotency_key_reused',
    }),
  inProgress: () => errors.conflict('A request with this Idempotency-Key is still in progress', { reason: 'idempotency_key_in_progress' }),
};

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

/** Runs `body` in one transaction of the work's own kind (a cap's, say: `(body) => cap.transaction(t, body)`). */
export type Within = <T>(body: (tx: StoreSession) => Promise<T>) => Promise<T>;
/**
 * Runs the work's transaction and records its answer (`fn`'s result) in that same transaction; `within` runs the
 * transaction when the work needs its own kind (default: the service's plain one).
 */
export type Commit<R> = (fn: (tx: StoreSession) => Promise<R>, within?: Within) => Promise<R>;

/** This process, as the holder of its claims (a restart is another holder; the old one is then gone). */
const HOLDER = newHolderId();
holderStarted(HOLDER);
/** What this process has seen of other holders' beats (kit lease rule). */
const WATCH = new LeaseWatch();

/** The claim was taken over while its work ran: the work's transaction is rolled back. */
class ClaimLost extends Error {}

/** How a service runs one transaction of its work (billing's retries on a lost unique-key race). */
export type Transact = <R>(store: Store, fn: (tx: StoreSession) => Promise<R>) => Promise<R>;
const plainTransaction: Transact = (store, fn) => store.transaction(fn);

/** Seals stored answers that carry a secret shown once (a new API key, a generated webhook secret). */
export interface AnswerSeal {
  encrypt(plain: string): string;
  decrypt(sealed: string): string;
}
const UNSEALED: AnswerSeal = { encrypt: (s) => s, decrypt: (s) => s };

export interface IdempotentOptions {
  /** Answers at rest encrypted with it (kit SecretBox): for work whose answer holds a secret. */
  seal?: AnswerSeal;
  watch?: LeaseWatch;
  timings?: Partial<IdempotencyTimings>;
  transact?: Transact;
  /**
   * For work with an effect outside the store that must not happen twice (a model call): a claim whose holder died
   * while it worked is not run again but answered with this error, which is kept as its answer.
   */
  abandoned?: () => AppError;
  /**
   * An answer recorded after the work (not in its transaction) longer than this, as JSON, is not kept: the key is
   * freed and a retry runs again (a store's record has a size limit; MongoDB's is 16 MB).
   */
  maxAnswerChars?: number;
}

/**
 * Runs `work` once per (tenant, operation, key): `work` calls `commit` with its transaction, and the answer is
 * recorded in it. Without a key, `work` simply runs. `body` is what must be the same for the answer to be replayed.
 */
export async function idempotent<R>(
  store: Store,
  scope: { tenantId: string; operation: string; key: string | null | undefined; body: unknown },
  work: (commit: Commit<R>) => Promise<R>,
  options: IdempotentOptions = {},
): Promise<R> {
  const transact = options.transact ?? plainTransaction;
  if (!scope.key) return work((fn, within) => (within ? within(fn) : transact(store, fn)));
  if (scope.key.length > 255) throw errors.validation([{ field: 'Idempotency-Key', message: 'must be at most 255 characters' }]);
  const timings = { ...TIMINGS, ...options.timings };
  const watch = options.watch ?? WATCH;
  const seal = options.seal ?? UNSEALED;
  const record = { tenantId: scope.tenantId, operation: scope.operation, key: scope.key, bodyHash: sha256Hex(JSON.stringify(scope.body)) };
  const deadline = monotonicNow() + timings.waitMs;
  for (;;) {
    const found = await claimIdempotencyKey(store, record, { holder: HOLDER, watch, leaseMs: timings.leaseMs });
    if (found.state === 'done') return replay<R>(found.record, seal);
    if (found.state === 'held') {
      if (monotonicNow() > deadline) throw idempotencyErrors.inProgress();
      await new Promise((r) => setTimeout(r, POLL_MS));
      continue;
    }
    const claim = found.claim;
    if (found.takenOver && options.abandoned) {
      const err = options.abandoned();
      const kept = await store
        .collection(idempotency)
        .update(
          claim.id,
          { status: 'pending', gen: claim.gen },
          { status: 'done', response: seal.encrypt(JSON.stringify(errorAnswer(err))) },
        );
      if (!kept) continue;
      throw err;
    }
    const outcome = await hold(store, { transact, seal, maxAnswerChars: options.maxAnswerChars ?? Infinity }, claim, work, timings.beatMs);
    if (outcome.lost) continue; // taken over while working: wait for the new holder's answer
    return outcome.result;
  }
}

/** What a claim attempt found: the key is now ours, already answered, or held by a live holder. */
export type ClaimOutcome =
  /** `takenOver`: the key was held by a claim whose holder is gone (its work may have started). */
  | { state: 'claimed'; claim: IdempotencyDoc; takenOver: boolean }
  | { state: 'done'; record: IdempotencyDoc }
  | { state: 'held'; record: IdempotencyDoc };

/** The record id of a key: one per tenant, operation and key. */
export const idempotencyRecordId = (tenantId: string, operation: string, key: string): string =>
  sha256Hex(`${tenantId}|${operation}|${key}`);

/**
 * One attempt to claim a key (a reused key with another body is refused): a fresh insert, or a take-over of an
 * expired record or of an abandoned claim (kit lease rule), as a compare-and-set on what was read. Used by
 * `idempotent` and by the gateway's shared claims (identity), which hold a claim across calls.
 */
export async function claimIdempotencyKey(
  store: Store,
  scope: { tenantId: string; operation: string; key: string; bodyHash: string },
  by: { holder: string; watch: LeaseWatch; leaseMs: number },
): Promise<ClaimOutcome> {
  const col = store.collection(idempotency);
  const id = idempotencyRecordId(scope.tenantId, scope.operation, scope.key);
  for (;;) {
    const existing = await col.get(id);
    // The 24 h expiry is a wall time of whichever replica wrote it: skew of seconds does not matter at that scale.
    const live = existing !== null && existing.expiresAt > Date.now();
    if (live) {
      if (existing.bodyHash !== scope.bodyHash) throw idempotencyErrors.reused();
      if (existing.status === 'done') return { state: 'done', record: existing };
      const beat = `${existing.gen ?? 0}:${existing.beat ?? 0}`;
      if (!holderIsGone(existing.holder ?? '') && !by.watch.stale(id, beat, by.leaseMs)) return { state: 'held', record: existing };
    }
    const claim: IdempotencyDoc = {
      id,
      tenantId: scope.tenantId,
      operation: scope.operation,
      bodyHash: scope.bodyHash,
      status: 'pending',
      holder: by.holder,
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
      if (err instanceof DuplicateKeyError) continue; // another request claimed it first: it is held
      throw err;
    }
    if (!claimed) continue;
    by.watch.forget(id);
    return { state: 'claimed', claim, takenOver: live };
  }
}

/** Does the work under the claim, beating it meanwhile, and records the answer. */
async function hold<R>(
  store: Store,
  { transact, seal, maxAnswerChars }: { transact: Transact; seal: AnswerSeal; maxAnswerChars: number },
  claim: IdempotencyDoc,
  work: (commit: Commit<R>) => Promise<R>,
  beatMs: number,
): Promise<{ lost: true } | { lost: false; result: R }> {
  const col = store.collection(idempotency);
  const mine = { status: 'pending' as const, gen: claim.gen };
  const answer = (saved: object) => ({ status: 'done' as const, response: seal.encrypt(JSON.stringify(saved)) });
  const tooLong = (result: R) => (JSON.stringify(result) ?? '').length > maxAnswerChars;
  const beat = setInterval(() => void col.increment(claim.id, mine, { beat: 1 }).catch(() => undefined), beatMs);
  beat.unref();
  let committed = false;
  const commit: Commit<R> = (fn, within = (body) => transact(store, body)) =>
    within(async (tx) => {
      const result = await fn(tx);
      // In the work's transaction: the work and its answer commit together, and only under our claim.
      if (!(await tx.collection(idempotency).update(claim.id, mine, answer({ ok: result })))) throw new ClaimLost();
      committed = true;
      return result;
    });
  try {
    const result = await work(commit);
    // Work that needed no transaction records its answer on its own (one too long to keep frees the key).
    if (!committed && tooLong(result)) await col.delete(claim.id, mine);
    else if (!committed && !(await col.update(claim.id, mine, answer({ ok: result })))) return { lost: true };
    return { lost: false, result };
  } catch (err) {
    if (err instanceof ClaimLost) return { lost: true };
    // A refusal is an answer too (the same request gets it again); anything else frees the key for a retry, and so
    // does a rate limit (it passes: a retry with the key must be able to succeed).
    if (err instanceof AppError && err.httpStatus < 500 && err.httpStatus !== 429)
      await col.update(claim.id, mine, answer(errorAnswer(err)));
    else await col.delete(claim.id, mine);
    throw err;
  } finally {
    clearInterval(beat);
  }
}

const errorAnswer = (err: AppError) => ({ error: { code: err.code, message: err.message, details: err.details } });

/**
 * Adds `more` to the answer recorded under a key (unsealed answers only), in `tx`: for work whose outcome is known
 * only after the commit that answered it (a model call's reply, answered by its id when it was stored).
 */
export async function amendIdempotentAnswer(tx: StoreSession, recordId: string, more: object): Promise<void> {
  const col = tx.collection(idempotency);
  const doc = await col.get(recordId);
  const saved = doc?.status === 'done' && doc.response ? (JSON.parse(doc.response) as { ok?: object }) : null;
  if (!saved?.ok) return;
  await col.update(recordId, { status: 'done', gen: doc!.gen ?? null }, { response: JSON.stringify({ ok: { ...saved.ok, ...more } }) });
}

/** Frees a key whose work turned out to do nothing (a model call refused before it answered): a retry runs afresh. */
export async function forgetIdempotencyKey(tx: StoreSession, recordId: string): Promise<void> {
  await tx.collection(idempotency).delete(recordId, { status: 'done' });
}

/**
 * Deletes the records of keys past their 24 h (by `createdAt`, which a take-over renews), hourly, on every replica
 * at once if need be: each delete is a compare-and-set on the `createdAt` read, so a key claimed afresh meanwhile is
 * kept. `now` for tests.
 */
export function idempotencyRetention(store: Store, logger: Logger, now?: () => number): Retention<IdempotencyDoc> {
  return new Retention(store, idempotency, {
    retentionDays: TTL_MS / 86_400_000,
    logger,
    label: 'idempotency keys',
    now,
    unchanged: (doc) => ({ createdAt: doc.createdAt }),
  });
}

function replay<R>(doc: IdempotencyDoc, seal: AnswerSeal): R {
  const saved = JSON.parse(doc.response ? seal.decrypt(doc.response) : '{}') as {
    ok?: R;
    error?: { code: AppError['code']; message: string; details: Record<string, unknown> };
  };
  if (saved.error) throw new AppError(saved.error.code, saved.error.message, saved.error.details);
  return saved.ok as R;
}
