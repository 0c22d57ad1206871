/**
 * Caps on the followers of agent runs (responses on `agent:<id>` with a `previous_response_id` whose run still
 * goes): at most `perTenant` per tenant and `perKey` per API key unfinished at once. Counted in the transaction that
 * inserts the follower's reply, after writing the tenant's guard document in it, as kit KeySlots does for a key: on
 * SQLite writers take turns, on MongoDB concurrent admissions of one tenant write the same document and all but one
 * retry with the others' inserts in view. No burst and no number of replicas passes either cap.
 */
import { AppError, type AuthClaims, capCounters, ensureGuard, type Store, type StoreSession } from '@svc/kit';
import { messages } from './collections';

export interface FollowerLimits {
  /** CHAT_RUN_FOLLOWERS_PER_TENANT */
  perTenant: number;
  /** CHAT_RUN_FOLLOWERS_PER_KEY */
  perKey: number;
}

const UNFINISHED = ['pending', 'streaming'] as const;
const guardId = (tenantId: string) => `run_followers:${tenantId}`;

export class FollowerSlots {
  constructor(
    private readonly store: Store,
    private readonly limits: FollowerLimits,
  ) {}

  /** Before the transaction: the tenant's guard document exists (created once, outside any transaction). */
  async prepare(tenantId: string): Promise<void> {
    await ensureGuard(this.store, guardId(tenantId));
  }

  /** Inside the transaction that inserts the follower: refuses with 429 past either cap. */
  async take(tx: StoreSession, auth: AuthClaims): Promise<void> {
    await tx.collection(capCounters).increment(guardId(auth.tid), {}, { count: 1 });
    const { perTenant, perKey } = this.limits;
    const col = tx.collection(messages);
    let tenant = 0;
    let key = 0;
    for (const status of UNFINISHED) {
      const { items } = await col.find({ tenantId: auth.tid, follower: true, status }, { limit: perTenant });
      tenant += items.length;
      if (auth.typ === 'api_key') key += items.filter((m) => m.credentialId === auth.sid).length;
    }
    if (tenant >= perTenant) throw refusal(`A tenant may follow at most ${perTenant} agent runs at once`, 'tenant', perTenant);
    if (auth.typ === 'api_key' && key >= perKey)
      throw refusal(`This API key may follow at most ${perKey} agent runs at once`, 'key', perKey);
  }
}

function refusal(message: string, scope: 'tenant' | 'key', limit: number): AppError {
  return new AppError('RATE_LIMIT_EXCEEDED', `${message}; retry when one ends`, {
    reason: 'too_many_run_followers',
    scope,
    limit,
    retryAfterS: 1,
  });
}
