/**
 * A tenant's exact caps on replies in progress: `replies` (CHAT_TENANT_CONCURRENCY) over those that hold a
 * reservation, and over the followers of agent runs (responses on `agent:<id>` with a `previous_response_id` whose run
 * still goes) `followers` per tenant and `followersPerKey` per API key. Counted in the transaction that inserts the
 * reply, then a write to the tenant's guard document in it, as kit KeySlots does for a key: on SQLite writers take
 * turns, on MongoDB concurrent admissions of one tenant write the same document and all but one retry with the
 * others' inserts in view. No burst and no number of replicas passes a cap (the count before the reservation is only
 * an early refusal).
 */
import { AppError, type AuthClaims, capCounters, type Store, type StoreSession } from '@svc/kit';
import { ensureGuard } from '@svc/contracts';
import { messages, type MessageDoc } from './collections';

export interface ReplyLimits {
  /** CHAT_TENANT_CONCURRENCY */
  replies: number;
  /** CHAT_RUN_FOLLOWERS_PER_TENANT */
  followers: number;
  /** CHAT_RUN_FOLLOWERS_PER_KEY */
  followersPerKey: number;
}

const UNFINISHED = ['pending', 'streaming'] as const;
const guardId = (tenantId: string) => `chat_replies:${tenantId}`;

/** Past CHAT_TENANT_CONCURRENCY: 429 with Retry-After. */
export function tooManyReplies(limit: number): AppError {
  return new AppError('RATE_LIMIT_EXCEEDED', `At most ${limit} replies can be generated at once; try again when one finishes`, {
    reason: 'too_many_replies',
    limit,
    retryAfterS: 1,
  });
}

export class ReplySlots {
  constructor(
    private readonly store: Store,
    readonly limits: ReplyLimits,
  ) {}

  /** The tenant's unfinished replies, counted on the (tenantId, status) index (none is read). */
  async unfinished(tx: Pick<Store, 'collection'>, tenantId: string): Promise<number> {
    let n = 0;
    for (const status of UNFINISHED) n += await tx.collection(messages).count({ tenantId, status });
    return n;
  }

  /** Before the transaction: the tenant's guard document exists (created once, outside any transaction). */
  async prepare(tenantId: string): Promise<void> {
    await ensureGuard(this.store, guardId(tenantId));
  }

  /**
   * Inside the transaction that inserts `reply` (before its insert): refuses with 429 past a cap. `held`: the reply
   * holds a reservation (a model call, or a follower), so it counts against CHAT_TENANT_CONCURRENCY.
   */
  async take(tx: StoreSession, auth: AuthClaims, reply: Pick<MessageDoc, 'follower'>, held: boolean): Promise<void> {
    if (!held && !reply.follower) return;
    await this.check(tx, auth, reply, held);
    // The guard's write after the reads: a refusal writes nothing (a group commit goes on without it), and two
    // admissions that read the same counts both write it, so on MongoDB one of them retries and reads again.
    await tx.collection(capCounters).increment(guardId(auth.tid), {}, { count: 1 });
  }

  /** Refuses with 429 past a cap; only reads. */
  private async check(tx: StoreSession, auth: AuthClaims, reply: Pick<MessageDoc, 'follower'>, held: boolean): Promise<void> {
    const { replies, followers, followersPerKey } = this.limits;
    if (held && (await this.unfinished(tx, auth.tid)) >= replies) throw tooManyReplies(replies);
    if (!reply.follower) return;
    let tenant = 0;
    let key = 0;
    for (const status of UNFINISHED) {
      const { items } = await tx.collection(messages).find({ tenantId: auth.tid, follower: true, status }, { limit: followers });
      tenant += items.length;
      if (auth.typ === 'api_key') key += items.filter((m) => m.credentialId === auth.sid).length;
    }
    if (tenant >= followers) throw tooManyFollowers(`A tenant may follow at most ${followers} agent runs at once`, 'tenant', followers);
    if (auth.typ === 'api_key' && key >= followersPerKey)
      throw tooManyFollowers(`This API key may follow at most ${followersPerKey} agent runs at once`, 'key', followersPerKey);
  }
}

function tooManyFollowers(message: string, scope: 'tenant' | 'key', limit: number): AppError {
  return new AppError('RATE_LIMIT_EXCEEDED', `${message}; retry when one ends`, {
    reason: 'too_many_run_followers',
    scope,
    limit,
    retryAfterS: 1,
  });
}
