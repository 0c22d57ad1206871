/**
 * Failed sign-ins in the audit log as bursts (docs/decisions.md, "Audit log"): every wrong password for a known
 * account is counted in the store (an atomic increment, so every replica counts into one number), and each
 * SIGN_IN_FAILURE_BURST-th failure since the account's last successful sign-in writes one `session.sign_in_failed`
 * entry (changes.after.failures: the count so far), in the transaction of that increment. A success resets the
 * count. Unknown emails have no tenant and are not logged (the login throttle and the logs cover them).
 */
import { type CallContext, type CollectionDef, DuplicateKeyError, nowIso, type Store, type StoreSession } from '@svc/kit';
import type { UserDoc } from '../collections';
import { recordAudit } from './log';

export const SIGN_IN_FAILURE_BURST = 5;

interface SignInFailureDoc {
  /** The user id. */
  id: string;
  count: number;
  createdAt: string;
}

export const signInFailures: CollectionDef<SignInFailureDoc> = { name: 'audit_sign_in_failures' };

/** Counts one failure; true when it completed a burst (an entry was written). */
export async function countSignInFailure(store: Store, ctx: CallContext, user: UserDoc): Promise<boolean> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await countOnce(store, ctx, user);
    } catch (err) {
      // Two replicas made the first count at once: the loser counts again on the winner's document.
      if (!(err instanceof DuplicateKeyError) || attempt >= 2) throw err;
    }
  }
}

function countOnce(store: Store, ctx: CallContext, user: UserDoc): Promise<boolean> {
  return store.transaction(async (tx) => {
    const col = tx.collection(signInFailures);
    const doc = (await col.increment(user.id, {}, { count: 1 })) ?? (await col.insert({ id: user.id, count: 1, createdAt: nowIso() }));
    if (doc.count % SIGN_IN_FAILURE_BURST !== 0) return false;
    await recordAudit(
      tx,
      ctx,
      {
        tenantId: user.tenantId,
        action: 'session.sign_in_failed',
        target: { type: 'user', id: user.id },
        changes: { after: { failures: doc.count } },
      },
      { type: 'user', id: user.id, email: user.email },
    );
    return true;
  });
}

export async function forgetSignInFailures(tx: StoreSession, userId: string): Promise<void> {
  await tx.collection(signInFailures).delete(userId);
}
