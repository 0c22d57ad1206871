import { GroupCommit, type AuthClaims, type AuthedContext } from '@svc/kit';
import { storePerTest } from '@svc/kit/testing';
import { messages, sessionCap } from './collections';
import { keyReplySlots } from './key-concurrency';
import type { Replies } from './replies';
import { ReplySlots } from './reply-slots';
import { admitReply, pendingReply, type ReplyStarter } from './start-reply';

// Admissions racing on this service's real store: every one reserves first, and the reservations all answer at once
// (a barrier), so each passes the early count before any reply is stored. Only the count in the insert's transaction
// can hold the caps then.
const storeOf = storePerTest('chat');
const lease = { leaseBeat: 0, leaseMs: 20_000 };

function ctx(key: string): AuthedContext {
  const auth: AuthClaims = { sub: 'usr_1', tid: 'ten_1', typ: 'api_key', role: 'owner', sid: key, jti: 'j', iat: 0, exp: 0 };
  return { auth, token: 'token', requestId: 'req', clientIp: null } as AuthedContext;
}

/** Admits `n` replies at once (keys `keyOf(i)`); how many were admitted, and the refusals' reasons. */
async function race(n: number, keyOf: (i: number) => string, follower: boolean): Promise<{ admitted: number; reasons: string[] }> {
  const store = storeOf();
  let arrived = 0;
  let open!: () => void;
  const barrier = new Promise<void>((resolve) => (open = resolve));
  const starter: ReplyStarter = {
    store,
    // Replies started together share a group commit: a refused one must not fail the others.
    replies: { batch: new GroupCommit(store) } as unknown as Replies,
    credits: {
      reserve: async () => {
        if (++arrived === n) open();
        await barrier;
      },
      release: async () => undefined,
    },
    cap: sessionCap(store, 100),
    keySlots: keyReplySlots(store),
    replySlots: new ReplySlots(store, { replies: 5, followers: 4, followersPerKey: 3 }),
  };
  const hold = { callId: 'c', source: 'chat_reply', sourceId: 'c', model: 'm', inputTokens: 1, outputTokens: 1, price: undefined };
  const outcomes = await Promise.allSettled(
    Array.from({ length: n }, (_, i) => {
      const c = ctx(keyOf(i));
      const reply = pendingReply(c.auth, lease, { sessionId: '', projectId: '', ...(follower ? { follower: true } : {}) });
      return admitReply(starter, c, { hold: hold as never, reply });
    }),
  );
  const reasons = outcomes.flatMap((o) =>
    o.status === 'rejected' ? [(o.reason as { details?: { reason?: string } }).details?.reason ?? ''] : [],
  );
  expect(await store.collection(messages).count({ tenantId: 'ten_1', status: 'pending' })).toBe(n - reasons.length);
  return { admitted: n - reasons.length, reasons };
}

it('holds CHAT_TENANT_CONCURRENCY exactly against a burst that passed the early count', async () => {
  const { admitted, reasons } = await race(20, (i) => `key_${i}`, false);
  expect(admitted).toBe(5);
  expect(new Set(reasons)).toEqual(new Set(['too_many_replies']));
});

it('holds the followers of agent runs to their cap per key, then per tenant', async () => {
  expect(await race(10, () => 'key_a', true)).toEqual({ admitted: 3, reasons: Array(7).fill('too_many_run_followers') });
});

it('holds the followers of agent runs to their cap per tenant over several keys', async () => {
  expect((await race(12, (i) => `key_${i % 4}`, true)).admitted).toBe(4);
});
