/**
 * How every reply starts, whatever asked for it (a REST chat message, a `/v1` call, a response on an agent), so the
 * guarantees come in the same order everywhere: the key's concurrency place prepared; the call's most possible cost
 * reserved before anything is stored (CONTRACT.md 8); the tenant's cap of replies in progress checked; the reply
 * stored `pending` with its lease, with what goes with it (a new session under its cap, the input turns, the
 * response), in one transaction that takes the key's place; then generated. A reservation whose reply could not be
 * stored is given back at once.
 */
import { type AuthedContext, isAppError, newId, nowIso, type Store, type StoreSession, type TenantCap, type Within } from '@svc/kit';
import type { CallHold, KeySlots } from '@svc/contracts';
import { messages, nextSeq, responses, sessions, type MessageDoc, type ResponseDoc, type SessionDoc } from './collections';
import type { CreditCheck } from './credits';
import type { OwnerRelay } from './owner-relay';
import type { ReplySlots } from './reply-slots';
import type { ReplyJob, Replies } from './replies';

export interface ReplyStarter {
  store: Store;
  replies: Replies;
  credits: CreditCheck;
  /** CHAT_SESSIONS_PER_TENANT: a new session takes its place in the reply's transaction. */
  cap: TenantCap;
  keySlots: KeySlots<MessageDoc>;
  /** The tenant's caps on replies in progress (CHAT_TENANT_CONCURRENCY, and on the followers of agent runs). */
  replySlots: ReplySlots;
  /** With CHAT_PEER_ADDR: its address is recorded on the replies this process generates (MessageDoc.owner). */
  owners?: OwnerRelay;
}

export interface ReplyStart {
  /** What to generate (the caller's tenant and credential are added); its `message` is the pending reply (newMessage). */
  job: Omit<ReplyJob, 'tenantId' | 'credentialId' | 'credentialType'>;
  /** The reply's reservation; absent for a reply whose source bills its own calls (an agent's run). */
  hold?: CallHold;
  /** Stored with the reply: the turns it answers, its response, the session it starts. */
  inputs?: MessageDoc[];
  resp?: ResponseDoc | null;
  newSession?: SessionDoc | null;
  /**
   * Runs the transaction that stores the reply, so a caller can record its answer in it (an Idempotency-Key's, kit
   * `Commit`): `within` is the transaction's own kind when it has one (the session cap's, with `newSession`).
   */
  commit?: (write: (tx: StoreSession) => Promise<void>, within?: Within) => Promise<unknown>;
  /** Done once the reply is admitted and stored, before it starts; when it fails, so does the stored reply. */
  beforeStart?: () => Promise<void>;
}

/** A message of the caller's tenant, `completed` unless the fields say otherwise (a pending reply). */
export function newMessage(
  auth: AuthedContext['auth'],
  fields: Partial<MessageDoc> & Pick<MessageDoc, 'role' | 'content' | 'sessionId'>,
  now = nowIso(),
): MessageDoc {
  return {
    id: newId('msg'),
    tenantId: auth.tid,
    projectId: '',
    status: 'completed',
    seq: nextSeq(),
    errorCode: null,
    errorMessage: null,
    inputTokens: null,
    outputTokens: null,
    leaseBeat: null,
    leaseMs: null,
    createdAt: now,
    completedAt: now,
    ...fields,
  };
}

/**
 * The pending assistant reply a call starts with: empty, leased to the replica that generates it, and carrying the API
 * key that asked (its concurrency place is counted on it).
 */
export function pendingReply(
  auth: AuthedContext['auth'],
  lease: Pick<MessageDoc, 'leaseBeat' | 'leaseMs'>,
  fields: Partial<MessageDoc> & Pick<MessageDoc, 'sessionId' | 'projectId'>,
  now = nowIso(),
): MessageDoc {
  return newMessage(
    auth,
    {
      role: 'assistant',
      content: '',
      status: 'pending',
      completedAt: null,
      ...lease,
      ...(auth.typ === 'api_key' ? { credentialId: auth.sid } : {}),
      ...fields,
    },
    now,
  );
}

export async function startReply(deps: ReplyStarter, c: AuthedContext, start: ReplyStart): Promise<void> {
  const { beforeStart, ...rest } = start;
  const job = sentByInsert(start)
    ? { ...start.job, message: { ...start.job.message, call: { ...start.job.message.call!, sent: true } } }
    : start.job;
  // Generated here: a reader on another chat process follows it from here while it runs.
  if (deps.owners) job.message.owner = deps.owners.self;
  await admitReply(deps, c, { ...rest, reply: job.message });
  const { auth } = c;
  if (beforeStart)
    await beforeStart().catch(async (err: unknown) => {
      const failed = isAppError(err) ? err : { code: 'INTERNAL_ERROR', message: 'The reply could not start' };
      await deps.replies.failRemote(job.message, failed.code, failed.message);
      throw err;
    });
  deps.replies.start({ ...job, tenantId: auth.tid, credentialId: auth.sid, credentialType: auth.typ });
}

/**
 * A reply whose model request leaves as soon as it is stored, and that nothing but its own generator can end before
 * then (no response to cancel it by from another process, nothing run before it starts, no source of its own): its
 * insert stores its call as `sent` (decision 122), saving the sent mark's write. From the insert's commit the request
 * starts with no write or wait between, as it did after the mark: only a crash in that same instant bills a request
 * that never left its prompt (the hold it reserved), as one between the mark and the socket always did.
 */
function sentByInsert(start: ReplyStart): boolean {
  return Boolean(start.hold && start.job.message.call && !start.resp && !start.beforeStart && !start.job.source);
}

/**
 * Everything before a reply's model call: its key place prepared, its hold reserved, the tenant's cap checked and the
 * pending reply stored (taking the key's place). From here a crash leaves a record the sweep bills or releases. Used
 * alone by a call that is not a streamed reply (an embeddings call).
 */
export async function admitReply(
  deps: ReplyStarter,
  c: AuthedContext,
  start: Omit<ReplyStart, 'job'> & { reply: MessageDoc },
): Promise<void> {
  const { auth } = c;
  const { reply } = start;
  await deps.keySlots.prepare(auth);
  if (start.hold || reply.follower) await deps.replySlots.prepare(auth.tid);
  // The reply's id is its call's id in billing: its llm.usage event settles this reservation. A hold carved from the
  // process's escrow is recorded on the reply (the reply is not stored yet), so whoever bills it names the escrow.
  const carved = start.hold ? await deps.credits.reserve(c, start.hold, { mayEscrow: Boolean(reply.call) && !reply.follower }) : undefined;
  if (carved) reply.escrow = { id: carved.escrowId, credits: carved.credits };
  try {
    // The caps are counted in the insert's transaction (ReplySlots), where a refusal also releases the hold below.
    const docs = { inputs: start.inputs ?? [], reply, resp: start.resp ?? null, held: Boolean(start.hold) };
    await insert(deps, auth, start.newSession ?? null, docs, start.commit);
  } catch (err) {
    // Never started: the hold goes back at once (billing's expiry would, later).
    if (start.hold) await deps.credits.release(c, reply.id, carved || undefined).catch(() => undefined);
    throw err;
  }
}

/** Stores a new reply and what goes with it in one transaction, taking the key's concurrency place. */
async function insert(
  deps: ReplyStarter,
  auth: AuthedContext['auth'],
  newSession: SessionDoc | null,
  docs: { inputs: MessageDoc[]; reply: MessageDoc; resp: ResponseDoc | null; held: boolean },
  commit?: ReplyStart['commit'],
): Promise<void> {
  // A key with a concurrency limit takes its place with a write before it may refuse: alone, so no other reply is
  // rolled back with it. Else the reply is stored with the others started meanwhile (group commit), where a tenant cap's
  // refusal (which writes nothing first) fails this reply only. Within another transaction (the session cap's) when
  // one is given.
  commit ??= (write, within) =>
    within ? within(write) : deps.keySlots.limited(auth) ? deps.store.transaction(write) : deps.replies.batch.commit(write);
  const write = async (tx: StoreSession) => {
    await deps.keySlots.take(tx, auth);
    await deps.replySlots.take(tx, auth, docs.reply, docs.held);
    const col = tx.collection(messages);
    for (const m of docs.inputs) await col.insert(m);
    await col.insert(docs.reply);
    if (docs.resp) await tx.collection(responses).insert(docs.resp);
  };
  if (newSession)
    await commit(write, (body) =>
      deps.cap.transaction(auth.tid, async (tx, places) => {
        await places.take();
        await tx.collection(sessions).insert(newSession);
        return body(tx);
      }),
    );
  else await commit(write);
}
