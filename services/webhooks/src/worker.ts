/**
 * The delivery loop: works the durable queue in the store. Each registration with due work is drained by one task
 * (its deliveries in order, one at a time, so a receiver sees a tenant's events in the order they happened unless
 * a retry intervenes); up to `concurrency` registrations are drained at once. A batch of attempts is claimed first
 * (compare-and-set, bumping each entry's claim generation, its due time pushed past the attempt's timeout), so a
 * second replica does not send them at the same time, and every claim still held beats (a fresh beat and due time)
 * every third of the claim's length until its attempt is recorded. A claim is taken over only when this process has itself seen
 * it unchanged for the claim's length (timeout + 5 s) on its own monotonic clock, never by comparing due times
 * written by another machine's clock. Every attempt is recorded with its outcome in one transaction that also
 * reschedules or finishes the delivery, and only while the claim is still this process's (same generation): an
 * attempt whose claim was taken over may have been sent, but its outcome is discarded.
 */
import {
  EgressError,
  egressRequest,
  holderIsGone,
  holderStarted,
  holderStopped,
  LeaseWatch,
  monotonicNow,
  newHolderId,
  nowIso,
  pages,
  type EgressRequest,
  type EgressPolicy,
  type Logger,
  type SecretBox,
  type Store,
  type StoreSession,
  type Where,
} from '@svc/kit';
import { domainMetrics } from '@svc/contracts';
import { deliveries, queue, webhooks, type AttemptDoc, type DeliveryDoc, type QueueDoc, type WebhookDoc } from './collections';
import { emitEndpointEvent } from './endpoint-events';
import { deliveryHeaders } from './payload';
import { signingKeys, type SigningKeys } from './secrets';

interface PendingWrite {
  fn: (tx: StoreSession) => Promise<unknown>;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
}

export interface WorkerOptions {
  store: Store;
  box: SecretBox;
  logger: Logger;
  policy: EgressPolicy;
  /** Milliseconds to wait after each failed attempt; past the end the delivery has failed. */
  scheduleMs: number[];
  timeoutMs: number;
  concurrency: number;
  /** Registrations of one tenant drained at once: a tenant's slow or failing endpoints hold no more slots. */
  tenantConcurrency: number;
  /**
   * How long a claim outlasts its attempt's timeout (default CLAIM_GRACE_MS): the slack for a beat to land on a
   * loaded store before another replica may take the claim over.
   */
  claimGraceMs?: number;
  /** Monotonic clock (ms) on which other processes' claims are judged; for tests. */
  now?: () => number;
  /** A commit recorded an event in the outbox (a registration disabled): the relay publishes it now. */
  onOutbox?: () => void;
}

/** A commit refused because the claim was taken over. */
const LOST = Symbol('lost claim');

/** Bytes of a response body kept with the attempt. */
export const EXCERPT_BYTES = 1024;
/** Attempts kept on a delivery (the schedule has at most 50; manual re-sends add more). */
const MAX_ATTEMPTS_KEPT = 100;
/** Longest idle sleep: due times written by another replica are noticed this late at worst. */
const IDLE_POLL_MS = 1000;
const PAGE = 200;
const DRAIN_BATCH = 20;
/** Default of WorkerOptions.claimGraceMs. */
export const CLAIM_GRACE_MS = 5000;

let lastNowUs = 0;
/**
 * Due time in epoch microseconds. Work due now gets a value strictly increasing in this process (deliveries made in
 * the same millisecond keep their order); a future due time is exact. One counter for both once put every new
 * delivery of every tenant behind the latest retry: after tenant A's first failure, B's deliveries waited for A's
 * retry (5 s, then 5 min, then 30 min).
 */
export function nextDueUs(atMs?: number): number {
  const nowMs = Date.now();
  if (atMs !== undefined && atMs > nowMs) return Math.round(atMs * 1000);
  lastNowUs = Math.max(Math.round(nowMs * 1000), lastNowUs + 1);
  return lastNowUs;
}

interface Outcome {
  ok: boolean;
  attempt: AttemptDoc;
}

/** The fence of a claim: the entry is still claimed under this generation. */
function claimOf(item: QueueDoc): Where<QueueDoc> {
  return { claimed: true, claimGen: item.claimGen ?? null };
}

/** What another process watches for change: any claim or beat restarts its wait. */
function beatOf(item: QueueDoc): string {
  return `${item.claimGen ?? 0}.${item.claimBeat ?? 0}`;
}

export class DeliveryWorker {
  private readonly request: EgressRequest;
  private readonly claimUs: number;
  /** How long a claim lasts: another process takes it over after seeing it unchanged this long. */
  private readonly claimMs: number;
  private readonly now: () => number;
  /** Other processes' claims as this one saw them. */
  private readonly watch: LeaseWatch;
  /** This loop's identity in its claims. */
  private readonly owner = newHolderId();
  private running = false;
  private loopDone: Promise<void> = Promise.resolve();
  /** Registrations being drained, and their tasks. */
  private readonly draining = new Map<string, Promise<void>>();
  /** Drains per tenant, and the tenant of each registration seen (a registration never changes tenant). */
  private readonly drainsOf = new Map<string, number>();
  private readonly tenantOfHook = new Map<string, string>();
  private kicked = false;
  /** Registrations known to have work queued, waiting for a drain. */
  private readonly wanted = new Set<string>();
  /** Writes waiting for the next group commit. */
  private readonly writes: PendingWrite[] = [];
  /** When the queue's head should be scanned next (epoch ms). */
  private nextScanMs = 0;
  private wakeUp: (() => void) | null = null;
  /** Aborts attempts in flight when a stop runs out of patience. */
  private readonly abort = new AbortController();

  constructor(private readonly o: WorkerOptions) {
    // The body cap only bounds what a receiver can make us read; we keep EXCERPT_BYTES of it.
    this.request = egressRequest({ ...o.policy, timeoutMs: o.timeoutMs, maxResponseBytes: 64 * 1024 });
    this.claimMs = o.timeoutMs + (o.claimGraceMs ?? CLAIM_GRACE_MS);
    this.claimUs = this.claimMs * 1000;
    this.now = o.now ?? monotonicNow;
    this.watch = new LeaseWatch(this.now);
  }

  /**
   * Starts the loop. Claims left by a process on this host that is gone (a crash, then this restart) are released at
   * once instead of waiting out their claims; others are judged by their beat.
   */
  async start(): Promise<void> {
    if (this.running) return;
    holderStarted(this.owner);
    await this.releaseClaims();
    this.running = true;
    this.loopDone = this.loop();
  }

  /** Stops taking work; attempts in flight get `graceMs` to finish, then are aborted and left for the next start. */
  async stop(graceMs = 3000): Promise<void> {
    if (!this.running) return;
    this.running = false;
    this.wake();
    const timer = setTimeout(() => this.abort.abort(), graceMs);
    await this.loopDone;
    await Promise.allSettled([...this.draining.values()]);
    clearTimeout(timer);
    holderStopped(this.owner);
  }

  /** New work was queued in this process for this registration: start on it now instead of at the next scan. */
  wake(webhookId?: string): void {
    if (webhookId) this.wanted.add(webhookId);
    this.kicked = true;
    this.wakeUp?.();
  }

  /** Asks for a queue scan at `atMs` (a retry falls due then). */
  private scanAt(atMs: number): void {
    if (atMs < this.nextScanMs) {
      this.nextScanMs = atMs;
      this.wake();
    }
  }

  private async releaseClaims(): Promise<void> {
    for await (const page of pages(this.o.store.collection(queue), { claimed: true }, { limit: 500 })) {
      // Claims without an owner were made before owners were recorded: only a crashed SQLite process left those.
      const gone = page.filter((i) => (i.claimOwner ? holderIsGone(i.claimOwner) : this.o.store.kind === 'sqlite'));
      if (gone.length === 0) continue;
      await this.o.store.transaction(async (tx) => {
        for (const item of gone)
          await tx
            .collection(queue)
            .update(item.id, claimOf(item), { claimed: false, dueUs: nextDueUs(), claimGen: (item.claimGen ?? 0) + 1 });
      });
    }
  }

  /**
   * Work is found two ways: registrations named by `wake` (this process queued something), and a scan of the
   * queue's head when something falls due (retries, other replicas, claims that lapsed), at least every second.
   */
  private async loop(): Promise<void> {
    while (this.running) {
      this.kicked = false;
      try {
        if (Date.now() >= this.nextScanMs) {
          this.nextScanMs = Infinity;
          this.nextScanMs = Math.min(this.nextScanMs, await this.scan());
        }
      } catch (err) {
        this.o.logger.error({ err }, 'scanning the delivery queue failed; retrying');
        this.nextScanMs = Date.now() + IDLE_POLL_MS;
      }
      for (const id of this.wanted) {
        if (this.draining.size >= this.o.concurrency) break;
        if (this.draining.has(id)) continue; // its drain picks the new work up, or it is wanted again when it ends
        const tenant = await this.tenantOf(id).catch(() => id);
        // A tenant at its share waits; other tenants' registrations go ahead. Its drains ending wake the loop.
        if ((this.drainsOf.get(tenant) ?? 0) >= this.o.tenantConcurrency) continue;
        this.wanted.delete(id);
        this.startDrain(id, tenant);
      }
      if (!this.running || this.kicked) continue;
      await this.sleep(Math.min(Math.max(this.nextScanMs - Date.now(), 1), IDLE_POLL_MS));
      if (!this.kicked) this.nextScanMs = Math.min(this.nextScanMs, Date.now());
    }
  }

  /** Marks registrations with due work as wanted; returns when the earliest work not yet due falls due (ms). */
  private async scan(): Promise<number> {
    const col = this.o.store.collection(queue);
    const nowUs = Date.now() * 1000;
    let cursor: string | null = null;
    let due = 0; // the backlog as this scan saw it (svc_webhook_deliveries_due; a capped count past 5 pages)
    const until = (ms: number) => {
      domainMetrics.webhookDue.set(due);
      return ms;
    };
    for (let pages = 0; pages < 5; pages++) {
      const page = await col.find({}, { order: 'asc', limit: PAGE, cursor });
      for (const item of page.items) {
        if (item.dueUs > nowUs) return until(Math.min(item.dueUs / 1000, Date.now() + IDLE_POLL_MS));
        due++;
        if (!this.draining.has(item.webhookId)) this.wanted.add(item.webhookId);
      }
      cursor = page.nextCursor;
      if (!cursor) return until(Date.now() + IDLE_POLL_MS);
    }
    return until(Date.now() + IDLE_POLL_MS); // a long due backlog, on registrations being drained: their drains go on
  }

  /** The tenant a registration belongs to ('' for one that is gone: its drain only clears its queue). */
  private async tenantOf(webhookId: string): Promise<string> {
    let tenant = this.tenantOfHook.get(webhookId);
    if (tenant === undefined) {
      tenant = (await this.o.store.collection(webhooks).get(webhookId))?.tenantId ?? '';
      if (this.tenantOfHook.size >= 100_000) this.tenantOfHook.clear();
      this.tenantOfHook.set(webhookId, tenant);
    }
    return tenant;
  }

  private startDrain(webhookId: string, tenant: string): void {
    this.drainsOf.set(tenant, (this.drainsOf.get(tenant) ?? 0) + 1);
    const task = this.drain(webhookId)
      .catch((err: unknown) => this.o.logger.error({ err, webhookId }, 'draining a webhook failed; will retry'))
      .finally(() => {
        this.draining.delete(webhookId);
        const left = (this.drainsOf.get(tenant) ?? 1) - 1;
        if (left > 0) this.drainsOf.set(tenant, left);
        else this.drainsOf.delete(tenant);
        this.wake();
      });
    this.draining.set(webhookId, task);
  }

  private async drain(webhookId: string): Promise<void> {
    const { store } = this.o;
    while (this.running) {
      const nowUs = Date.now() * 1000;
      const { items } = await store.collection(queue).find({ webhookId }, { order: 'asc', limit: DRAIN_BATCH });
      const due = items.filter((i) => i.dueUs <= nowUs);
      if (due.length === 0) return;
      const claimed = await this.claim(due);
      if (claimed.length === 0) return; // another replica holds them
      // Every claim of the batch beats until its attempt is recorded, those waiting behind a slow receiver too: no
      // other process takes them over (and sends them again, out of order) while this one is still on its way.
      const held = new Map(claimed.map((i) => [i.id, i]));
      const beats = new Heartbeat(
        () => this.beat(held).catch((err: unknown) => this.o.logger.warn({ err, webhookId }, 'renewing delivery claims failed; next beat')),
        this.claimMs / 3,
      );
      let stopped = false;
      try {
        // Read per batch so that a PATCH (URL, secret, active) applies from the next batch on.
        let hook = await store.collection(webhooks).get(webhookId);
        const keys = hook ? signingKeys(this.o.box, hook) : null;
        for (const { id } of claimed) {
          if (!this.running) {
            stopped = true;
            break;
          }
          const item = held.get(id);
          if (!item) continue; // taken over meanwhile (this process stalled): the other one sends it
          hook = await this.deliver(item, hook, keys);
          held.delete(id);
        }
      } finally {
        await beats.stop();
      }
      // Stopping: what was not attempted is released for the next start or another replica. (After a failure the
      // claims lapse instead, as a crashed process's do.)
      if (stopped) for (const item of held.values()) await this.unclaim(item);
    }
  }

  /**
   * Takes the items for this process; an item another replica claimed first is skipped. A claimed item is taken
   * over only when this process has seen its claim unchanged for `claimMs` (a crashed or stuck claimer).
   */
  private claim(items: QueueDoc[]): Promise<QueueDoc[]> {
    return this.commit(async (tx) => {
      const col = tx.collection(queue);
      const out: QueueDoc[] = [];
      for (const item of items) {
        if (item.claimed && !this.watch.stale(item.id, beatOf(item), this.claimMs)) continue;
        const where: Where<QueueDoc> = item.claimed
          ? { ...claimOf(item), claimBeat: item.claimBeat ?? null }
          : { claimed: false, claimGen: item.claimGen ?? null, dueUs: item.dueUs };
        const until = Date.now() * 1000 + this.claimUs;
        const got = await col.update(item.id, where, {
          dueUs: until,
          claimed: true,
          claimGen: (item.claimGen ?? 0) + 1,
          claimBeat: 0,
          claimOwner: this.owner,
        });
        this.watch.forget(item.id);
        if (got) out.push(got);
      }
      return out;
    });
  }

  /**
   * One heartbeat of every claim still held, in one commit: a fresh beat and due time each. A claim that no longer
   * matches was recorded meanwhile or taken over: it is dropped from `held`.
   */
  private async beat(held: Map<string, QueueDoc>): Promise<void> {
    const renewed = await this.commit(async (tx) => {
      const col = tx.collection(queue);
      const out: Array<[string, QueueDoc | null]> = [];
      for (const item of held.values())
        out.push([
          item.id,
          await col.update(
            item.id,
            { ...claimOf(item), claimBeat: item.claimBeat ?? null },
            { claimBeat: (item.claimBeat ?? 0) + 1, dueUs: Date.now() * 1000 + this.claimUs },
          ),
        ]);
      return out;
    });
    for (const [id, item] of renewed) {
      if (!held.has(id)) continue; // its attempt ended meanwhile
      if (item) held.set(id, item);
      else held.delete(id);
    }
  }

  private async unclaim(item: QueueDoc): Promise<void> {
    await this.o.store
      .collection(queue)
      .update(item.id, claimOf(item), { dueUs: nextDueUs(), claimed: false, claimGen: (item.claimGen ?? 0) + 1 });
  }

  /** One attempt of one delivery; returns the registration as it is afterwards (null when it is gone). */
  private async deliver(item: QueueDoc, hook: WebhookDoc | null, keys: SigningKeys | null): Promise<WebhookDoc | null> {
    const { store } = this.o;
    const d = await store.collection(deliveries).get(item.id);
    if (!d || d.status !== 'pending' || !hook || !keys) {
      await store.collection(queue).delete(item.id, claimOf(item));
      return hook;
    }
    if (!hook.active && !d.manual) {
      // Events queued before the registration was disabled are not sent; a manual re-send still can be.
      await this.commit(async (tx) => {
        if (!(await tx.collection(queue).delete(item.id, claimOf(item)))) return; // no longer ours
        await tx.collection(deliveries).update(d.id, { status: 'pending' }, { status: 'failed', nextAttemptAt: null, updatedAt: nowIso() });
      });
      return hook;
    }
    const outcome = await this.send(hook.url, keys, d);
    if (outcome === null) {
      await this.unclaim(item); // aborted by stop(): not an attempt, sent again on the next start
      return hook;
    }
    return this.record(item, d, hook, outcome);
  }

  /** POSTs the delivery; null when aborted by stop(). */
  private async send(url: string, keys: SigningKeys, d: DeliveryDoc): Promise<Outcome | null> {
    const at = nowIso();
    const started = performance.now();
    let statusCode = 0;
    let error = '';
    let responseExcerpt = '';
    try {
      const res = await this.request(url, {
        method: 'POST',
        headers: deliveryHeaders(keys, d.eventId, d.body),
        body: d.body,
        signal: this.abort.signal,
      });
      statusCode = res.status;
      responseExcerpt = await res.excerpt(EXCERPT_BYTES);
    } catch (err) {
      if (this.abort.signal.aborted) return null;
      error = describe(err);
    }
    const latencyMs = Math.round(performance.now() - started);
    const number = (d.attempts.at(-1)?.number ?? 0) + 1;
    return { ok: statusCode >= 200 && statusCode < 300, attempt: { number, at, statusCode, latencyMs, error, responseExcerpt } };
  }

  private async record(item: QueueDoc, d: DeliveryDoc, hook: WebhookDoc, { ok, attempt }: Outcome): Promise<WebhookDoc | null> {
    const { scheduleMs } = this.o;
    const scheduled = d.manual ? d.scheduled : d.scheduled + 1;
    const delayMs = ok || d.manual ? undefined : scheduleMs[scheduled - 1];
    const status = ok ? 'succeeded' : delayMs === undefined ? 'failed' : 'pending';
    const dueUs = delayMs === undefined ? 0 : nextDueUs(Date.now() + delayMs);
    const firstAttemptAt = d.firstAttemptAt ?? attempt.at;
    const recorded = await this.commit(async (tx) => {
      // Fenced: the outcome counts only while the claim is still ours. The queue entry goes first, so a lost claim
      // writes nothing at all (the same transaction may carry other drains' writes: nothing here may throw).
      const q = tx.collection(queue);
      const next = { dueUs, claimed: false, claimGen: (item.claimGen ?? 0) + 1 };
      const kept = status === 'pending' ? await q.update(item.id, claimOf(item), next) : await q.delete(item.id, claimOf(item));
      if (!kept) return LOST;
      await tx.collection(deliveries).update(
        d.id,
        { status: 'pending' },
        {
          status,
          attempts: [...d.attempts, attempt].slice(-MAX_ATTEMPTS_KEPT),
          scheduled,
          firstAttemptAt,
          nextAttemptAt: status === 'pending' ? new Date(dueUs / 1000).toISOString() : null,
          updatedAt: nowIso(),
        },
      );
      if (status === 'pending') this.scanAt(dueUs / 1000);
      return this.health(tx, hook, d, ok, status === 'failed' && !d.manual, attempt.at, firstAttemptAt);
    });
    if (recorded !== LOST) {
      if (hook.active && recorded && !recorded.active) this.o.onOutbox?.(); // disabled: its event is in the outbox
      return recorded;
    }
    this.o.logger.warn(
      { deliveryId: d.id, webhookId: hook.id },
      'delivery claim taken over by another process; this attempt is not recorded',
    );
    return hook;
  }

  /**
   * The disable rule: `failingSince` marks the first failed attempt after the last success. A registration is
   * disabled when a delivery runs out of its retry schedule and every attempt to it since that delivery's first
   * attempt has failed (with the default schedule: about 27.6 hours of failures). Manual sends clear it on success
   * but never disable. Disabling records `webhook.endpoint_disabled` in the same transaction.
   */
  private async health(
    tx: StoreSession,
    hook: WebhookDoc,
    d: DeliveryDoc,
    ok: boolean,
    exhausted: boolean,
    at: string,
    firstAttemptAt: string,
  ): Promise<WebhookDoc | null> {
    const hooks = tx.collection(webhooks);
    if (ok) {
      if (hook.failingSince === null) return hook;
      return hooks.update(hook.id, {}, { failingSince: null });
    }
    let current: WebhookDoc | null = hook;
    if (hook.failingSince === null && !d.manual) current = await hooks.update(hook.id, { failingSince: null }, { failingSince: at });
    current ??= await hooks.get(hook.id);
    if (!current || !exhausted || !current.active || current.failingSince === null || current.failingSince > firstAttemptAt) return current;
    const disabledReason = `Every delivery attempt since ${current.failingSince} failed and delivery ${d.id} ran out of retries`;
    this.o.logger.warn({ webhookId: hook.id, tenantId: hook.tenantId }, 'webhook disabled after failing past the retry schedule');
    const disabled = await hooks.update(hook.id, { active: true }, { active: false, disabledReason, updatedAt: nowIso() });
    if (!disabled) return current;
    await emitEndpointEvent(tx, 'webhook.endpoint_disabled', disabled);
    return disabled;
  }

  /**
   * Group commit: writes asked for while a transaction is being built or committed share the next one, so the
   * concurrent drains pay for one commit between them instead of one each. A failing batch is retried one write
   * at a time, so one bad write fails alone.
   */
  private commit<R>(fn: (tx: StoreSession) => Promise<R>): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.writes.push({ fn, resolve, reject } as PendingWrite);
      if (this.writes.length === 1) setImmediate(() => void this.flushWrites());
    });
  }

  private async flushWrites(): Promise<void> {
    const batch = this.writes.splice(0);
    if (batch.length === 0) return;
    try {
      const results = await this.o.store.transaction(async (tx) => {
        const out: unknown[] = [];
        for (const w of batch) out.push(await w.fn(tx));
        return out;
      });
      batch.forEach((w, i) => w.resolve(results[i]));
    } catch {
      for (const w of batch) await this.o.store.transaction(w.fn).then(w.resolve, w.reject);
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wakeUp = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wakeUp = done;
    });
  }
}

/** A short, secret-free reason for a failed attempt. */
function describe(err: unknown): string {
  if (err instanceof EgressError) return `${err.reason}: ${err.message}`;
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  if (cause?.code) return `connection: ${cause.code}`;
  return `connection: ${cause?.message ?? (err as Error).message ?? 'failed'}`.slice(0, 300);
}

/** Runs `fn` every `everyMs` until stopped, never two at once (a beat fences on the one before it). */
class Heartbeat {
  private running: Promise<void> | null = null;
  private readonly timer: NodeJS.Timeout;

  constructor(fn: () => Promise<void>, everyMs: number) {
    this.timer = setInterval(() => {
      this.running ??= fn().finally(() => (this.running = null));
    }, everyMs);
  }

  /** Stops the beats; resolves once a beat in flight has ended. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
  }
}
