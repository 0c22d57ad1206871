import {
  addToOutbox,
  amendIdempotentAnswer,
  forgetIdempotencyKey,
  GroupCommit,
  isAppError,
  LeaseWatch,
  monotonicNow,
  nowIso,
  type Logger,
  type OutboxRelay,
  type Store,
  type StoreSession,
} from '@svc/kit';
import { type CallOutcome, domainEvent, modelCallInfo, TOPICS, domainMetrics } from '@svc/contracts';
import {
  type CallPlan,
  type CandidateMeta,
  type CircuitBreaker,
  estimateUsage,
  isLlmError,
  type LlmEmbedRequest,
  type LlmEmbedResult,
  type LlmEvent,
  type LlmMessage,
  type LlmSettings,
  type LlmTool,
  type LlmTransport,
  planCall,
  type PricingSettings,
  routePlan,
  type ServedModel,
} from '@svc/llm';
import { usageCost } from '@svc/llm/pricing';
import { messages, type MessageDoc, type MessageStatus, type ReplyCall, type StoredApproval, type StoredToolCall } from './collections';
import { LiveReply } from './live';

export interface ReplyTimings {
  /** How often a streaming reply's text is written to the store. */
  flushMs: number;
  /**
   * How long a reply's lease lasts: its beat changes at least every third of it while the reply streams, and
   * another process fails the reply after seeing the beat unchanged this long on its own clock.
   */
  leaseMs: number;
  /** On stop, how long replies in progress may take to finish before they are cut and failed. */
  drainMs: number;
  /** Monotonic clock (ms) on which the sweeper judges other processes' leases, and this one's beat; for tests. */
  now?: () => number;
}

/** How replies call models: the process's circuit breaker, and each call's idle timeout and retries. */
export interface ReplyModels {
  breaker?: CircuitBreaker;
  /** Wait for the provider's headers and then between chunks (a hang moves on to the next model). Default 60 s. */
  timeoutMs?: number;
  /** Retries of the last model that can be tried. Default 2. */
  maxRetries?: number;
  /** Prices a reply given without a plan (its default model); default CREDITS_PER_1K_TOKENS 1 and CREDITS_PER_USD 1000. */
  pricing?: PricingSettings;
  /** This process's credit escrow (escrow.ts): told what each reply carved from it spent, once its bill is stored. */
  escrow?: { ended(escrowId: string, callId: string, cost: number | null): void };
}

/** The LLM to use for one reply, resolved when the message was posted (identity's ResolveLlmSettings). */
export interface ReplyLlm {
  settings: LlmSettings;
  /** Tried in order when the model fails before its first token; temperature and maxTokens come from `settings`. */
  fallbacks?: LlmSettings[];
  /** tenant or platform: whose API key pays. */
  keySource: string;
  /**
   * The deployments the reply may go to (a catalogue name's entries, or the default model), each priced, with the
   * fallbacks; absent: `settings` then `fallbacks`, priced by their provider and model.
   */
  plan?: CallPlan;
}

export interface ReplyJob {
  tenantId: string;
  /** The credential that sent the message (the JWT's `sid` and `typ`): billing shows usage per API key. */
  credentialId?: string;
  credentialType?: string;
  message: MessageDoc;
  history: LlmMessage[];
  llm: ReplyLlm;
  /** Tools offered to the model (the OpenAI-compatible API passes the caller's through). */
  tools?: LlmTool[];
  /**
   * Each chunk is stored (with where it ends) before any reader of a durable stream sends it: a stream resumed by
   * chunk or by text offset (REST chat's Last-Event-ID), even from another process or after a crash, continues exactly
   * where the first reader was.
   */
  durable?: boolean;
  /** Where the reply comes from instead of the tenant's model (an agent's run); such a reply bills nothing itself. */
  source?: (signal: AbortSignal) => AsyncIterable<ReplySourceEvent>;
}

/** What a reply's source yields: the model's events, or (an agent's run) a wait for approval that ends it. */
export type ReplySourceEvent = LlmEvent | { type: 'approval'; approval: StoredApproval };

const UNFINISHED: MessageStatus[] = ['pending', 'streaming'];

type Tokens = { inputTokens: number; outputTokens: number; cachedInputTokens?: number };

/** The outcome of a reply failed with `code` by another process or a sweep: its timings are not known there. */
export function failedOutcome(code: string): CallOutcome {
  return { status: code === 'REPLY_CANCELLED' ? 'cancelled' : 'error', errorCode: code, latencyMs: 0, ttftMs: 0 };
}

/**
 * The reply's `llm.usage`, carrying its id as the call id: billing settles the reply's reservation with it, once per
 * call whoever sends it (generator or sweep). No tokens: the call produced nothing billable, its hold is released.
 */
async function billReply(
  tx: StoreSession,
  tenantId: string,
  messageId: string,
  call: ReplyCall,
  usage: Tokens,
  estimated: boolean,
  outcome: CallOutcome,
  escrowId: string | undefined,
) {
  await replyUsage(tx, tenantId, messageId, {
    ...(escrowId ? { escrowId } : {}),
    provider: call.provider,
    model: call.name || call.model,
    inputTokens: usage.inputTokens,
    outputTokens: usage.outputTokens,
    ...(usage.cachedInputTokens ? { cachedInputTokens: usage.cachedInputTokens } : {}),
    ...(call.price ? { price: call.price } : {}),
    call: modelCallInfo(
      {
        origin: call.origin ?? 'chat',
        requestId: call.requestId,
        endUser: call.endUser,
        entryId: call.entryId,
        servedModel: call.model,
        userId: call.userId,
      },
      outcome,
    ),
    keySource: call.keySource,
    credentialId: call.credentialId,
    credentialType: call.credentialType,
    estimated,
    projectId: call.projectId ?? '',
    agentId: call.agentId ?? '',
  });
}

/**
 * Gives back the reservation of a reply that made no model call of its own (a follower of an agent run): an
 * `llm.usage` with no tokens and no call to log, in the transaction that ends the reply.
 */
async function releaseHold(tx: StoreSession, tenantId: string, messageId: string) {
  await replyUsage(tx, tenantId, messageId, {
    provider: '',
    model: '',
    inputTokens: 0,
    outputTokens: 0,
    keySource: '',
    credentialId: '',
    credentialType: '',
    estimated: false,
    projectId: '',
    agentId: '',
  });
}

type UsageFields = Omit<Extract<Parameters<typeof domainEvent>[3], { $case: 'usage' }>['value'], 'source' | 'sourceId' | 'callId'>;

/** A reply's `llm.usage` (its id is the call's and the reservation's), in the outbox of the transaction `tx`. */
async function replyUsage(tx: StoreSession, tenantId: string, messageId: string, fields: UsageFields) {
  await addToOutbox(
    tx,
    domainEvent(TOPICS.chat, 'llm.usage', tenantId, {
      $case: 'usage',
      value: { source: 'chat_reply', sourceId: messageId, callId: messageId, ...fields },
    }),
  );
}

/**
 * What a reply cut off by a crash is billed: the provider's usage if stored, else its stored text (estimated), else
 * its prompt when its request was sent.
 */
export function recordedUsage(m: MessageDoc): { usage: Tokens; estimated: boolean } {
  if (m.embeddings) return { usage: { inputTokens: m.call?.promptTokens ?? 0, outputTokens: 0 }, estimated: true };
  if (m.inputTokens !== null || m.outputTokens !== null)
    return { usage: { inputTokens: m.inputTokens ?? 0, outputTokens: m.outputTokens ?? 0 }, estimated: false };
  // Nothing stored: a call whose request left is billed its prompt, as its hold reserved it; one never sent, nothing.
  if (!m.content) return { usage: { inputTokens: m.call?.sent ? m.call.promptTokens : 0, outputTokens: 0 }, estimated: true };
  return { usage: { inputTokens: m.call?.promptTokens ?? 0, outputTokens: Math.ceil(m.content.length / 4) }, estimated: true };
}

export function errorCodeFor(err: unknown): { code: string; message: string } {
  if (isLlmError(err)) {
    if (err.kind === 'cancelled') return { code: 'REPLY_INTERRUPTED', message: 'The chat service stopped before the reply finished' };
    return { code: `LLM_${err.kind.toUpperCase()}`, message: err.message };
  }
  return { code: 'INTERNAL_ERROR', message: 'The reply failed' };
}

/**
 * Generates assistant replies in the background and stores them as they stream. A reply does not depend on any
 * reader: a client that disconnects loses nothing. Each reply holds a lease in the store while it runs (a beat);
 * a reply whose beat stood still for the lease's length, as the sweeper of any chat process sees it on its own
 * clock (its process died), is failed, so none stays `streaming`. Failing it is the take-over: the generator's
 * later writes are compare-and-sets on its beat and are refused; its usage is still billed.
 */
export class Replies {
  private readonly live = new Map<string, LiveReply>();
  private readonly running = new Map<string, { abort: AbortController; done: Promise<void> }>();
  /** Replies streaming in this process, written to the store together every flushMs. */
  private readonly progress = new Map<string, Progress>();
  private flushing: Promise<void> = Promise.resolve();
  /**
   * The flush asked for and not started yet: every chunk of a durable reply and every reply's usage ask for one, and
   * all that ask meanwhile share it (group commit: one transaction for every live reply of the process).
   */
  private flushQueued: { durableOnly: boolean } | null = null;
  /** Replies being cancelled here (their cut is stored as REPLY_CANCELLED, not as interrupted). */
  private readonly cancelling = new Set<string>();
  private flusher: NodeJS.Timeout | undefined;
  private sweeper: NodeJS.Timeout | undefined;
  private stopping = false;
  private readonly now: () => number;
  /** Other processes' reply leases as this process's sweeper saw them. */
  private readonly watch: LeaseWatch;
  /**
   * Replies' first and final writes (stored pending; outcome and bill) that nothing can refuse, several to a
   * transaction under load.
   */
  readonly batch: GroupCommit;

  constructor(
    private readonly store: Store,
    private readonly relay: OutboxRelay,
    private readonly logger: Logger,
    private readonly transport: LlmTransport,
    private readonly timings: ReplyTimings,
    private readonly models: ReplyModels = {},
  ) {
    this.now = timings.now ?? monotonicNow;
    this.watch = new LeaseWatch(this.now);
    this.batch = new GroupCommit(store);
  }

  /** A reply given without a plan: its settings, then its fallbacks, each priced by its provider and model. */
  private planOf(llm: ReplyLlm): CallPlan {
    const pricing = this.models.pricing ?? { creditsPerUsd: 1000, creditsPer1kTokens: 1 };
    const { temperature, maxTokens } = llm.settings;
    const fallbacks = (llm.fallbacks ?? []).map((f) => ({ ...f, temperature, maxTokens }));
    return planCall(llm.settings.model ?? '', [], [llm.settings, ...fallbacks], pricing);
  }

  /** A call on `plan` as one model chain, with this process's breaker, timeout, retries and egress-guarded transport. */
  private route(plan: CallPlan, tenantId: string, callId: string) {
    const extra = { transport: this.transport, ...(this.models.timeoutMs ? { timeoutMs: this.models.timeoutMs } : {}) };
    return routePlan(
      plan,
      {
        breaker: this.models.breaker,
        scope: tenantId,
        maxRetries: this.models.maxRetries,
        onAttemptFailed: (a) =>
          this.logger.warn(
            { messageId: callId, provider: a.provider, model: a.model, kind: a.error.kind, skipped: a.skipped },
            a.skipped ? 'model skipped (circuit open)' : 'model failed before answering',
          ),
      },
      extra,
    );
  }

  /**
   * Embeds `request` on `plan` (CONTRACT.md 12) for `record`, the call's pending record stored with its lease and hold
   * (admitReply). Its lease is beaten while the call runs, as a streaming reply's, so only a dead process's record is
   * swept (and billed its input tokens as reserved). Routed as a reply's call and billed once, in the transaction that
   * deletes the record: its input tokens at the serving model's input price, with its request-log info; a failed call
   * is billed no tokens, which gives its hold back. Cut after the drain on stop, as replies are.
   */
  async embed(
    tenantId: string,
    record: MessageDoc,
    plan: CallPlan,
    request: LlmEmbedRequest,
  ): Promise<{ result: LlmEmbedResult; servedModel: string }> {
    const abort = new AbortController();
    const work = this.runEmbed(tenantId, record, plan, request, abort.signal);
    this.running.set(record.id, { abort, done: work.then(settledNothing, settledNothing) });
    try {
      return await work;
    } finally {
      this.running.delete(record.id);
    }
  }

  private async runEmbed(
    tenantId: string,
    record: MessageDoc,
    plan: CallPlan,
    request: LlmEmbedRequest,
    signal: AbortSignal,
  ): Promise<{ result: LlmEmbedResult; servedModel: string }> {
    const progress = this.track(record, tenantId, new LiveReply(record.id), false);
    const routed = this.route(plan, tenantId, record.id);
    const startedAt = this.now();
    let result: LlmEmbedResult | undefined;
    let failure: unknown;
    try {
      result = await routed.chain.embed(request, {
        signal,
        onServed: (s) => (progress.served = { ...s, meta: routed.metaOf(s.index) }),
      });
    } catch (err) {
      failure = err;
    } finally {
      this.progress.delete(record.id);
    }
    // A flush in flight may still beat the record: the last write comes after it.
    await this.flushing;
    const latencyMs = Math.max(1, this.now() - startedAt);
    const call = progress.served ? { ...record.call!, ...servedCall(progress.served) } : record.call!;
    const outcome: CallOutcome = result
      ? { status: 'ok', errorCode: '', latencyMs, ttftMs: latencyMs }
      : { ...failedOutcome(signal.aborted ? 'REPLY_CANCELLED' : errorCodeFor(failure).code), latencyMs, ttftMs: latencyMs };
    const usage = { inputTokens: result?.inputTokens ?? 0, outputTokens: 0 };
    try {
      await this.store.transaction(async (tx) => {
        // Fenced as a reply's last write: a record another process failed meanwhile was billed there (billing keeps
        // the first llm.usage of a call).
        if (!progress.lost) await tx.collection(messages).delete(record.id, this.fence(progress));
        await billReply(tx, tenantId, record.id, call, usage, result?.estimated ?? false, outcome, record.escrow?.id);
      });
      this.escrowEnded(record, { call, usage });
      this.relay.notify();
    } catch (err) {
      this.escrowEnded(record, null);
      // The record stays unfinished with a lease nobody beats: a sweep bills it once the lease has run out.
      this.logger.warn({ err, callId: record.id }, 'recording an embeddings call failed; the sweep will bill it');
    }
    if (!result) throw failure;
    return { result, servedModel: progress.served?.model ?? call.model };
  }

  /**
   * Tells this process's escrow what a reply carved from it spent (as billing computes it from the usage it was sent),
   * or null when that is not known (its whole hold stays spent). Once per reply: later calls change nothing.
   */
  private escrowEnded(m: MessageDoc, billed: { call: ReplyCall; usage: Tokens } | null): void {
    if (!m.escrow || !this.models.escrow) return;
    const per1k = this.models.pricing?.creditsPer1kTokens ?? 1;
    const cost = billed ? usageCost({ ...billed.usage, price: billed.call.price }, per1k) : null;
    this.models.escrow.ended(m.escrow.id, m.id, cost);
  }

  /** The reply if this process is generating it (or just finished it). */
  get(messageId: string): LiveReply | undefined {
    return this.live.get(messageId);
  }

  /** The lease fields of a new reply (stored `pending` before generation starts). */
  newLease(): Pick<MessageDoc, 'leaseBeat' | 'leaseMs'> {
    return { leaseBeat: 0, leaseMs: this.timings.leaseMs };
  }

  /** Starts writing progress, and fails replies left unfinished by a dead process, now and then every half lease. */
  async startSweeping(): Promise<void> {
    await this.sweep();
    this.sweeper = setInterval(
      () => {
        this.sweep().catch((err: unknown) => this.logger.warn({ err }, 'sweeping unfinished replies failed; will retry'));
      },
      Math.max(100, this.timings.leaseMs / 2),
    );
    this.sweeper.unref();
  }

  async sweep(): Promise<number> {
    const col = this.store.collection(messages);
    let failed = 0;
    for (const status of UNFINISHED) {
      let cursor: string | null = null;
      do {
        const page = await col.find({ status }, { limit: 200, cursor, order: 'asc' });
        for (const m of page.items) {
          if (this.running.has(m.id)) continue;
          if (!this.watch.stale(m.id, m.leaseBeat ?? 'none', m.leaseMs ?? this.timings.leaseMs)) continue;
          // Failing it and billing what was stored of it (the provider's usage, else the text so far) commit
          // together: exactly one sweeper wins the compare-and-set, and the call is billed once.
          const done = await this.failRemote(
            m,
            'REPLY_INTERRUPTED',
            'The reply was interrupted (the chat service stopped) before it finished',
            false,
          );
          this.watch.forget(m.id);
          if (done) failed++;
        }
        cursor = page.nextCursor;
      } while (cursor);
    }
    if (failed) {
      this.relay.notify();
      this.logger.warn({ failed }, 'failed (and billed) replies left unfinished by a stopped chat process');
    }
    return failed;
  }

  /** Starts generating; returns at once. The message is stored as `pending` with a lease already. */
  start(job: ReplyJob): void {
    const abort = new AbortController();
    const live = new LiveReply(job.message.id, job.durable ?? false);
    this.live.set(job.message.id, live);
    const done = this.generate(job, live, abort.signal)
      .catch((err: unknown) => this.logger.error({ err, messageId: job.message.id }, 'reply generation crashed'))
      .finally(() => {
        // A reply whose end could not be stored: its escrowed hold is spent whole (a sweep bills it later).
        this.escrowEnded(job.message, null);
        this.running.delete(job.message.id);
        // Readers that already hold it finish from memory; new readers read the stored message.
        this.live.delete(job.message.id);
      });
    this.running.set(job.message.id, { abort, done });
  }

  /**
   * Fails a reply generated by another process (or by a dead one) with a compare-and-set on its lease as last read,
   * billing what was stored of it in the same transaction (once per call, whoever bills it). Null when it changed
   * meanwhile. A reply kept only while it ran is deleted.
   */
  async failRemote(m: MessageDoc, code: string, message: string, notify = true): Promise<MessageDoc | null> {
    const done = await this.store.transaction(async (tx) => {
      const updated = await tx
        .collection(messages)
        .update(
          m.id,
          { status: m.status, leaseBeat: m.leaseBeat ?? null },
          { status: 'failed', errorCode: code, errorMessage: message, completedAt: nowIso(), leaseBeat: null },
        );
      if (updated?.call) {
        const { usage, estimated } = recordedUsage(updated);
        await billReply(tx, updated.tenantId, updated.id, updated.call, usage, estimated, failedOutcome(code), updated.escrow?.id);
      } else if (updated?.follower) await releaseHold(tx, updated.tenantId, updated.id);
      if (updated) await settleKey(tx, updated, false);
      return updated;
    });
    if (done?.call) this.escrowEnded(done, { call: done.call, usage: recordedUsage(done).usage });
    if (done?.ephemeral) await this.store.collection(messages).delete(done.id);
    if (done && notify) this.relay.notify();
    return done;
  }

  /**
   * Stops a reply this process is generating: it is stored as failed with REPLY_CANCELLED and billed for what it
   * produced. Resolves once it is stored; false when it is not generating here.
   */
  async cancel(messageId: string): Promise<boolean> {
    const r = this.running.get(messageId);
    if (!r) return false;
    this.cancelling.add(messageId);
    r.abort.abort();
    await r.done;
    return true;
  }

  /** Lets replies in progress finish for up to drainMs, then cuts the rest (stored as failed, not left streaming). */
  async stop(): Promise<void> {
    this.stopping = true;
    clearInterval(this.sweeper);
    const all = () => Promise.all([...this.running.values()].map((r) => r.done));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([all(), new Promise((r) => (timer = setTimeout(r, this.timings.drainMs)))]);
    clearTimeout(timer);
    for (const r of this.running.values()) r.abort.abort();
    await all();
    clearInterval(this.flusher);
  }

  /** The flusher ticks only while replies stream: an idle chat service wakes for nothing. */
  private ensureFlusher(): void {
    if (this.flusher) return;
    this.flusher = setInterval(() => {
      if (this.progress.size === 0) {
        clearInterval(this.flusher);
        this.flusher = undefined;
        return;
      }
      void this.flush();
    }, this.timings.flushMs);
    this.flusher.unref();
  }

  /**
   * Writes the text of every streaming reply that grew (and beats leases not beaten for a third of their length) in
   * one transaction: one commit per tick for all replies instead of one per reply. Runs one at a time.
   */
  flush(queued?: { durableOnly: boolean }): Promise<void> {
    this.flushing = this.flushing
      .then(async () => {
        if (queued && this.flushQueued === queued) this.flushQueued = null;
        const durableOnly = queued?.durableOnly ?? false;
        const now = this.now();
        const due = [...this.progress.values()].filter(
          (p) =>
            !p.lost &&
            (!durableOnly || p.durable) &&
            (p.live.length > p.storedLength ||
              p.usage !== p.storedUsage ||
              p.served !== p.storedServed ||
              now - p.beatAt >= this.timings.leaseMs / 3),
        );
        if (due.length === 0) return;
        const written = await this.store.transaction(async (tx) => {
          const col = tx.collection(messages);
          const out: Array<{
            p: Progress;
            length: number;
            chunks: number;
            usage: Tokens | undefined;
            served: Served | undefined;
            ok: boolean;
          }> = [];
          for (const p of due) {
            const content = p.live.text();
            const chunks = p.live.chunks.length;
            const { usage, served } = p;
            const doc = await col.update(p.message.id, this.fence(p), {
              content,
              status: 'streaming',
              leaseBeat: p.beat + 1,
              ...(p.durable ? { ends: p.live.ends.slice(0, chunks) } : {}),
              ...(usage ? { inputTokens: usage.inputTokens, outputTokens: usage.outputTokens } : {}),
              // Stored with the first text: a crash from here on bills the model that served, at its price.
              ...(served ? servedFields(p.message, served) : {}),
            });
            out.push({ p, length: content.length, chunks, usage, served, ok: doc !== null });
          }
          return out;
        });
        for (const { p, length, chunks, usage, served, ok } of written) {
          if (!ok) {
            // Another process failed it (it saw our beat stand still, or cancelled it): stop writing. A cancelled
            // reply's model call is stopped too (nobody wants its output); one taken for dead goes on to be billed
            // for what the provider reports.
            p.lost = true;
            void this.store
              .collection(messages)
              .get(p.message.id)
              .then((doc) => {
                if (doc?.errorCode === 'REPLY_CANCELLED') this.running.get(p.message.id)?.abort.abort();
              })
              .catch(() => undefined);
            continue;
          }
          p.live.markDurable(chunks);
          p.stored = 'streaming';
          p.storedLength = length;
          p.storedUsage = usage;
          p.storedServed = served;
          p.beat += 1;
          p.beatAt = now;
        }
      })
      .catch((err: unknown) => this.logger.warn({ err }, 'could not store reply progress; will retry'));
    return this.flushing;
  }

  /**
   * Asks for a flush soon: the one already queued, if any, takes this reply too. `durableOnly`: only durable replies'
   * chunks are due (the others' text waits for the tick).
   */
  private flushSoon(durableOnly: boolean): void {
    if (this.flushQueued) {
      this.flushQueued.durableOnly &&= durableOnly;
      return;
    }
    const queued = (this.flushQueued = { durableOnly });
    // Started once this turn of the event loop has handled what arrived in it: every reply's chunks and ends that
    // came together share the batch, and a reply that ended meanwhile is written once, by its end.
    setImmediate(() => void this.flush(queued));
  }

  get size(): number {
    return this.running.size;
  }

  /** The fence of a reply's writes: still unfinished as this process last wrote it, with its last beat. */
  private fence(p: Progress) {
    return { tenantId: p.tenantId, status: p.stored, leaseBeat: p.beat };
  }

  /**
   * Stores the reply's call as sent before its request leaves (as agents do): a crash from here on bills at least its
   * prompt (the input its hold reserved), since the provider may have answered and charged. Fenced like every write:
   * a reply another process failed or cancelled meanwhile is not sent at all. In the group commit, with the other
   * replies' marks, inserts and ends of the same turn: the request waits for that shared commit. A reply stored
   * `sent` by its insert (startReply) has nothing to write here.
   */
  private async markSent(p: Progress): Promise<void> {
    const call = p.message.call;
    if (!call || call.sent) return;
    const sent = { ...call, sent: true };
    const marked = await this.batch.commit((tx) => tx.collection(messages).update(p.message.id, this.fence(p), { call: sent }));
    if (!marked) throw new ReplyFailure('REPLY_INTERRUPTED', 'The reply was ended elsewhere before its model call was sent');
    p.message = { ...p.message, call: sent };
  }

  /** A call this process runs from its stored record on: the flusher stores its progress and beats its lease. */
  private track(message: MessageDoc, tenantId: string, live: LiveReply, durable: boolean): Progress {
    const progress: Progress = {
      message,
      tenantId,
      live,
      stored: 'pending',
      storedLength: 0,
      beat: message.leaseBeat ?? 0,
      beatAt: this.now(),
      lost: false,
      usage: undefined,
      storedUsage: undefined,
      durable,
      served: undefined,
      storedServed: undefined,
    };
    this.progress.set(message.id, progress);
    this.ensureFlusher();
    return progress;
  }

  private async generate(job: ReplyJob, live: LiveReply, signal: AbortSignal): Promise<void> {
    const col = this.store.collection(messages);
    const { message, tenantId } = job;
    const progress = this.track(message, tenantId, live, job.durable ?? false);

    let usage: Tokens | undefined;
    const startedAt = this.now();
    let ttftMs = 0;
    let outcome: { status: 'completed' } | { status: 'failed'; code: string; message: string };
    const toolCalls: StoredToolCall[] = [];
    let finishReason: string | null = null;
    let approval: StoredApproval | null = null;
    try {
      let events: AsyncIterable<ReplySourceEvent>;
      if (job.source) events = job.source(signal);
      else {
        // The name's entries by weight (or the default model), then the fallbacks; the reply's one reservation
        // covers whichever serves (it holds the most costly price and the largest output bound among them).
        const routed = this.route(job.llm.plan ?? this.planOf(job.llm), tenantId, message.id);
        await this.markSent(progress);
        const onServed = (served: ServedModel) => {
          progress.served = { ...served, meta: routed.metaOf(served.index) };
          live.served = served.model;
        };
        events = routed.chain.stream({ messages: job.history, ...(job.tools?.length ? { tools: job.tools } : {}) }, { signal, onServed });
      }
      for await (const event of events) {
        if (ttftMs === 0 && (event.type === 'text' || event.type === 'tool_call')) ttftMs = Math.max(1, this.now() - startedAt);
        if (event.type === 'text') {
          live.append(event.delta);
          if (job.durable) this.flushSoon(true);
        } else if (event.type === 'tool_call')
          toolCalls.push({ id: event.id, name: event.name, arguments: JSON.stringify(event.arguments) });
        else if (event.type === 'approval') approval = event.approval;
        else if (event.type === 'usage') {
          const cached = event.cachedInputTokens;
          usage = { inputTokens: event.inputTokens, outputTokens: event.outputTokens, ...(cached ? { cachedInputTokens: cached } : {}) };
          // Stored with the next batch (or with the end, if it comes first): a crash from then on bills the provider's
          // usage, not an estimate.
          progress.usage = usage;
          this.flushSoon(false);
        } else if (event.type === 'finish') {
          if (event.reason === 'error') throw new RefusedError();
          finishReason = event.reason;
        }
      }
      outcome = { status: 'completed' };
    } catch (err) {
      const e = this.cancelling.has(message.id)
        ? { code: 'REPLY_CANCELLED', message: 'The reply was cancelled' }
        : err instanceof RefusedError
          ? { code: 'LLM_REFUSED', message: 'The model ended the reply (content policy)' }
          : err instanceof ReplyFailure
            ? { code: err.code, message: err.message }
            : isAppError(err)
              ? { code: err.code, message: err.message }
              : errorCodeFor(err);
      if (e.code === 'INTERNAL_ERROR') this.logger.error({ err, messageId: message.id }, 'reply failed');
      else this.logger.warn({ code: e.code, reason: e.message, messageId: message.id }, 'reply failed');
      outcome = { status: 'failed', ...e };
    } finally {
      this.progress.delete(message.id);
      this.cancelling.delete(message.id);
    }
    // A flush in flight may still write this reply: the final write comes after it.
    await this.flushing;

    const final: Partial<MessageDoc> = {
      ...(progress.served ? servedFields(progress.message, progress.served) : {}),
      content: live.text(),
      status: outcome.status,
      errorCode: outcome.status === 'failed' ? outcome.code : null,
      errorMessage: outcome.status === 'failed' ? outcome.message : null,
      inputTokens: usage?.inputTokens ?? null,
      outputTokens: usage?.outputTokens ?? null,
      leaseBeat: null,
      completedAt: nowIso(),
      ...(job.durable ? { ends: [...live.ends] } : {}),
      ...(toolCalls.length ? { toolCalls } : {}),
      ...(finishReason && outcome.status === 'completed' ? { finishReason } : {}),
      ...(approval ? { approval } : {}),
    };
    // A reply cut off midway (a provider error, a stop) is billed too: for what the provider reported, else for the
    // tokens streamed so far, estimated at 4 characters a token with the prompt counted the same way.
    const billed = usage ?? (live.text() ? estimateUsage(job.history, live.text()) : undefined);
    const call: ReplyCall = final.call ??
      progress.message.call ?? {
        provider: job.llm.settings.provider,
        model: job.llm.settings.model ?? '',
        keySource: job.llm.keySource,
        credentialId: job.credentialId ?? '',
        credentialType: job.credentialType ?? '',
        promptTokens: 0,
        ...(progress.served ? servedCall(progress.served) : {}),
      };
    // Nothing billable (the provider refused before answering): the event with no tokens releases the reservation.
    // A reply from another source (an agent's run) made no model call of its own: its run bills its calls.
    const ended: CallOutcome =
      outcome.status === 'completed'
        ? { status: 'ok', errorCode: '', latencyMs: this.now() - startedAt, ttftMs }
        : { ...failedOutcome(outcome.code), latencyMs: this.now() - startedAt, ttftMs };
    const bill = (tx: StoreSession) =>
      job.source
        ? message.follower
          ? releaseHold(tx, tenantId, message.id)
          : Promise.resolve()
        : billReply(tx, tenantId, message.id, call, billed ?? { inputTokens: 0, outputTokens: 0 }, !usage, ended, message.escrow?.id);
    // Fenced: the reply is completed only as this process last wrote it. When another process failed it meanwhile
    // (it took our beat for a dead one), the text and outcome are discarded, but the model call was made: billed.
    // A reply kept only while it ran that no other process reads (a chat completion: its one reader is here, on the
    // live reply) ends with its delete, fenced the same way, in the commit that bills it.
    const gone = message.ephemeral && !job.durable;
    // The model refused before answering: nothing was produced or billed (a cut or a stop is never this).
    const didNothing =
      outcome.status === 'failed' &&
      !billed &&
      !toolCalls.length &&
      !job.source &&
      outcome.code !== 'REPLY_CANCELLED' &&
      outcome.code !== 'REPLY_INTERRUPTED';
    // Committed with the ends of the other replies that finish meanwhile (group commit).
    const doc = await this.batch.commit(async (tx) => {
      const col = tx.collection(messages);
      let updated: MessageDoc | null = null;
      if (progress.lost) updated = null;
      else if (!gone) updated = await col.update(message.id, this.fence(progress), final);
      else if (await col.delete(message.id, this.fence(progress))) updated = { ...message, ...final } as MessageDoc;
      await bill(tx);
      if (updated) await settleKey(tx, updated, didNothing);
      return updated;
    });
    if (!doc) this.logger.warn({ messageId: message.id }, 'reply was failed by another chat process; its outcome is discarded');
    // Billed as stored here; a reply another process failed was billed there, for what it read: its whole hold counts.
    this.escrowEnded(message, doc ? { call, usage: billed ?? { inputTokens: 0, outputTokens: 0 } } : null);
    this.relay.notify();
    if (doc) domainMetrics.replies.inc({ status: doc.status });
    if (billed) {
      domainMetrics.llmTokens.inc({ source: 'chat', direction: 'input' }, billed.inputTokens);
      domainMetrics.llmTokens.inc({ source: 'chat', direction: 'output' }, billed.outputTokens);
    }
    // Lost the reply to a sweeper: readers get what the store says.
    live.finish(doc ?? (await col.get(message.id)) ?? ({ ...message, ...final, status: 'failed' } as MessageDoc));
    // Kept only while it ran (its readers finish from memory).
    if (message.ephemeral && !gone)
      await col.delete(message.id).catch((err: unknown) => this.logger.warn({ err }, 'could not delete a reply'));
    if (this.stopping && outcome.status === 'failed') this.logger.info({ messageId: message.id }, 'reply cut by shutdown');
  }
}

class RefusedError extends Error {}

const settledNothing = () => undefined;

/**
 * A `/v1` call's Idempotency-Key record (calls/keyed.ts) gets its reply as it ended, in the transaction that ends it,
 * for a retry with the key to replay; a call that did nothing frees its key instead, so a retry runs it afresh.
 */
async function settleKey(tx: StoreSession, ended: MessageDoc, didNothing: boolean): Promise<void> {
  if (!ended.idempotencyId) return;
  if (didNothing) await forgetIdempotencyKey(tx, ended.idempotencyId);
  else await amendIdempotentAnswer(tx, ended.idempotencyId, { final: ended });
}

/** A model that serves a reply, with the entry it came from and its price. */
type Served = ServedModel & { meta?: CandidateMeta };

/** What the call record takes from the model that serves. */
function servedCall(served: Served): Pick<ReplyCall, 'provider' | 'model'> & Partial<ReplyCall> {
  return {
    provider: served.provider,
    model: served.model,
    ...(served.meta ? { entryId: served.meta.entryId, price: served.meta.price } : {}),
  };
}

/** The served model on the reply, and on its call (what billing is told, by the generator or a sweep). */
function servedFields(message: MessageDoc, served: Served): Partial<MessageDoc> {
  return {
    model: served.model,
    ...(message.call ? { call: { ...message.call, ...servedCall(served) } } : {}),
  };
}

/** A reply source's own failure, stored with its code (an agent's run that failed: AGENT_RUN_FAILED). */
export class ReplyFailure extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'ReplyFailure';
  }
}

/** What the store holds of a reply streaming in this process. */
interface Progress {
  message: MessageDoc;
  tenantId: string;
  live: LiveReply;
  stored: MessageStatus;
  storedLength: number;
  /** The lease beat last written (the fence of the next write), and when (this process's clock). */
  beat: number;
  beatAt: number;
  lost: boolean;
  /** The provider's usage once it arrived, and the value last stored. */
  usage: Tokens | undefined;
  storedUsage: Tokens | undefined;
  /** Chunk ends are stored with the text (ReplyJob.durable). */
  durable: boolean;
  /** The model that serves the reply, once it started answering, and the value last stored. */
  served: Served | undefined;
  storedServed: Served | undefined;
}
