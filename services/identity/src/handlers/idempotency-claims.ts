/**
 * The gateway's Idempotency-Key claims (CONTRACT.md 14), in identity's store so that every gateway replica shares
 * them (SQLite by default, MongoDB when distributed). A gateway claims a POST's key before answering it, beats the
 * claim while the request runs, and then records the HTTP answer to replay, or releases the claim (a 5xx, a 429)
 * so that a retry runs again. The records are kit's idempotency records (operation `http`), and a claim's take-over
 * follows kit's lease rule: a gateway gone from this host at once, another after its beat stood still for LEASE_MS.
 * Answers are kept encrypted with the service's SecretBox.
 */
import { claimIdempotencyKey, errors, idempotency, idempotencyErrors, idempotencyRecordId, LeaseWatch, type CallContext } from '@svc/kit';
import { authed } from '@svc/contracts';
import type { identityV1 } from '@svc/proto';
import type { IdentityDeps } from '../context';

const OPERATION = 'http';
/** A gateway beats its claims every few seconds (gateway/src/plugins/idempotency.ts); this is several beats. */
const LEASE_MS = 30_000;
const SHA256_HEX = /^[0-9a-f]{64}$/;
/** An answer larger than this is not kept (the gateway treats it as one it cannot replay). */
const MAX_BODY_CHARS = 1024 * 1024;

function checkRef(key: string, gen?: number): void {
  if (!SHA256_HEX.test(key)) throw errors.validation([{ field: 'key', message: 'must be a sha256 in hex' }]);
  if (gen !== undefined && (!Number.isSafeInteger(gen) || gen < 1))
    throw errors.validation([{ field: 'gen', message: 'must be positive' }]);
}

export function idempotencyClaimHandlers(deps: IdentityDeps) {
  const col = deps.store.collection(idempotency);
  const watch = new LeaseWatch();
  const recordId = (tenantId: string, key: string) => idempotencyRecordId(tenantId, OPERATION, key);
  return {
    async claimIdempotencyKey(
      req: identityV1.ClaimIdempotencyKeyRequest,
      ctx: CallContext,
    ): Promise<identityV1.ClaimIdempotencyKeyResponse> {
      const { auth } = authed(ctx);
      checkRef(req.key);
      if (!SHA256_HEX.test(req.fingerprint)) throw errors.validation([{ field: 'fingerprint', message: 'must be a sha256 in hex' }]);
      if (!req.holder || req.holder.length > 200) throw errors.validation([{ field: 'holder', message: 'must be 1 to 200 characters' }]);
      const scope = { tenantId: auth.tid, operation: OPERATION, key: req.key, bodyHash: req.fingerprint };
      const found = await claimIdempotencyKey(deps.store, scope, { holder: req.holder, watch, leaseMs: LEASE_MS });
      if (found.state === 'held') throw idempotencyErrors.inProgress();
      if (found.state === 'done')
        return {
          outcome: 'replay',
          gen: found.record.gen ?? 0,
          answer: JSON.parse(deps.box.decrypt(found.record.response ?? '')) as identityV1.IdempotentAnswer,
        };
      return { outcome: 'claimed', gen: found.claim.gen ?? 0 };
    },

    async beatIdempotencyKey(req: identityV1.BeatIdempotencyKeyRequest, ctx: CallContext): Promise<identityV1.BeatIdempotencyKeyResponse> {
      const { auth } = authed(ctx);
      checkRef(req.key, req.gen);
      const held = await col.increment(recordId(auth.tid, req.key), { status: 'pending', gen: req.gen }, { beat: 1 });
      return { held: held !== null };
    },

    async finishIdempotencyKey(
      req: identityV1.FinishIdempotencyKeyRequest,
      ctx: CallContext,
    ): Promise<identityV1.FinishIdempotencyKeyResponse> {
      const { auth } = authed(ctx);
      checkRef(req.key, req.gen);
      const id = recordId(auth.tid, req.key);
      const mine = { status: 'pending' as const, gen: req.gen };
      if (req.release || !req.answer || req.answer.body.length > MAX_BODY_CHARS) return { recorded: await col.delete(id, mine) };
      // Only under the claim: a take-over (this gateway judged gone) leaves the new holder's answer alone. Sealed: an
      // answer may hold a secret shown once (a new API key, a generated webhook secret).
      const response = deps.box.encrypt(JSON.stringify(req.answer));
      return { recorded: (await col.update(id, mine, { status: 'done', response })) !== null };
    },
  };
}
