/**
 * `Idempotency-Key` on the billing POSTs (CONTRACT.md 5): the same key with the same body within 24 h gets the same
 * answer and is charged once, also when two arrive at once. A key is claimed by inserting its record (unique id =
 * hash of tenant, operation and key); the holder does the work and stores the answer; a concurrent request waits
 * for that answer. A claim whose holder died lapses after `LEASE_MS` and can be taken over. The same key with a
 * different body is a 409.
 */
import { AppError, DuplicateKeyError, errors, nowIso, sha256Hex, type Store } from '@svc/kit';
import { idempotency, type IdempotencyDoc } from './collections';

const TTL_MS = 24 * 3600 * 1000;
const LEASE_MS = 30_000;
const WAIT_MS = 10_000;

export async function idempotent<R>(
  store: Store,
  scope: { tenantId: string; operation: string; key: string; body: unknown },
  work: () => Promise<R>,
): Promise<R> {
  if (!scope.key) return work();
  if (scope.key.length > 255) throw errors.validation([{ field: 'Idempotency-Key', message: 'must be at most 255 characters' }]);
  const col = store.collection(idempotency);
  const id = sha256Hex(`${scope.tenantId}|${scope.operation}|${scope.key}`);
  const bodyHash = sha256Hex(JSON.stringify(scope.body));
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const now = Date.now();
    const existing = await col.get(id);
    if (existing && existing.expiresAt > now) {
      if (existing.bodyHash !== bodyHash)
        throw errors.conflict('This Idempotency-Key was used with a different request', { reason: 'idempotency_key_reused' });
      if (existing.status === 'done') return replay<R>(existing);
      if (existing.leaseUntil > now) {
        if (now > deadline)
          throw errors.conflict('A request with this Idempotency-Key is still in progress', { reason: 'idempotency_in_progress' });
        await new Promise((r) => setTimeout(r, 50));
        continue;
      }
    }
    // Claim it: a fresh insert, or a take-over of an expired record / a lapsed claim (compare-and-set on its state).
    const claim: IdempotencyDoc = {
      id,
      tenantId: scope.tenantId,
      operation: scope.operation,
      bodyHash,
      status: 'pending',
      leaseUntil: now + LEASE_MS,
      response: null,
      createdAt: nowIso(),
      expiresAt: now + TTL_MS,
    };
    let claimed: IdempotencyDoc | null;
    try {
      claimed = existing
        ? await col.update(id, { status: existing.status, leaseUntil: existing.leaseUntil }, claim)
        : await col.insert(claim);
    } catch (err) {
      if (err instanceof DuplicateKeyError) continue; // another request claimed it first: wait for its answer
      throw err;
    }
    if (!claimed) continue;
    try {
      const result = await work();
      await col.update(
        id,
        { status: 'pending', leaseUntil: claim.leaseUntil },
        { status: 'done', response: JSON.stringify({ ok: result }) },
      );
      return result;
    } catch (err) {
      // A refusal is an answer too (the same request gets it again); anything else frees the key for a retry.
      if (err instanceof AppError && err.httpStatus < 500)
        await col.update(
          id,
          { status: 'pending' },
          { status: 'done', response: JSON.stringify({ error: { code: err.code, message: err.message, details: err.details } }) },
        );
      else await col.delete(id, { status: 'pending' });
      throw err;
    }
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
