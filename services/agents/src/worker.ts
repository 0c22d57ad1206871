/**
 * The run worker of an agents process. It claims queued runs with a compare-and-set (queued -> running, with a
 * lease), so two workers never run one run; beats the lease while the run goes on; and takes over runs whose
 * holder stopped beating. Each process holds its runs under its own holder id (kit newHolderId: host/pid/random), so
 * replicas on one host never take each other's runs for their own. A run whose holder is known to be gone (a process
 * of this host that exited, a crash and restart) is taken at once; so, at start-up, are the runs of an earlier life
 * of the same AGENTS_WORKER_ID when the operator gave one (a name unique among live workers, stable across
 * restarts); every other run only after its beat stood still for the lease. A run never stays `running` after its
 * worker died: it resumes from its recorded steps, or fails with a reason after AGENTS_MAX_ATTEMPTS claims.
 *
 * Leases never compare clocks across machines: a run is abandoned when this worker has itself seen its beat stand
 * still for the holder's lease length on its own monotonic clock (kit LeaseWatch). Every claim bumps the run's
 * lease generation and every commit of the holder (steps, result, events, renewals, hand-backs) is a
 * compare-and-set on (owner, generation): a worker whose run was taken over writes nothing more and stops.
 */
import {
  holderIsGone,
  holderStarted,
  holderStopped,
  LeaseWatch,
  monotonicNow,
  newHolderId,
  nowIso,
  type Logger,
  type OutboxRelay,
  type Store,
  type StoreSession,
  type Where,
} from '@svc/kit';
import { runs, type RunCall, type RunDoc } from './collections';
import { emitRunEvent, settleRecordedCall } from './run-events';
import { driveRun, type Lease, type LoopDeps, LostLease } from './run-loop';

/** The queue is read in pages while looking for runs of tenants below their limit (at most this many runs). */
const QUEUE_PAGE = 50;
const QUEUE_PAGES = 10;

export interface WorkerOptions {
  /**
   * AGENTS_WORKER_ID: a name stable across restarts and unique among live workers (a StatefulSet pod's), whose
   * earlier claims a new process takes back at once. Unset, runs are taken back by holder (this host's gone
   * processes) or by lease: a shared name such as the host name would make replicas take each other's live runs.
   */
  workerId?: string;
  concurrency: number;
  /**
   * Runs of one tenant running at once, across every worker: counted in the store, so several replicas share the
   * limit (two replicas claiming at the same instant can pass it by one each; the next claims wait again).
   */
  tenantConcurrency: number;
  pollMs: number;
  leaseMs: number;
  maxAttempts: number;
  /** Monotonic clock (ms) on which this worker judges other workers' leases; for tests. */
  now?: () => number;
}

interface Active {
  controller: AbortController;
  done: Promise<void>;
  /** The lease generation of this worker's claim: the fence of its commits. */
  generation: number;
}

export class RunWorker {
  /** This worker's holder id (host/pid/random): unique per process incarnation, never shared by two replicas. */
  readonly owner = newHolderId();
  private readonly active = new Map<string, Active>();
  private timer: NodeJS.Timeout | undefined;
  private polling: Promise<void> | null = null;
  private again = false;
  private stopped = false;
  private recovered = false;
  /** Other workers' leases as this worker saw them. */
  private readonly watch: LeaseWatch;

  constructor(
    private readonly store: Store,
    private readonly relay: OutboxRelay,
    private readonly logger: Logger,
    private readonly deps: LoopDeps,
    private readonly options: WorkerOptions,
  ) {
    this.watch = new LeaseWatch(options.now ?? monotonicNow);
  }

  start(): void {
    holderStarted(this.owner);
    this.timer = setInterval(() => this.notify(), this.options.pollMs);
    this.timer.unref();
    this.notify();
  }

  /** Looks for work now (after an execute or an approval) instead of at the next poll. */
  notify(): void {
    if (this.stopped) return;
    if (this.polling) {
      this.again = true;
      return;
    }
    this.polling = this.poll()
      .catch((err: unknown) => this.logger.warn({ err }, 'run worker poll failed; will retry'))
      .finally(() => {
        this.polling = null;
        if (this.again) {
          this.again = false;
          this.notify();
        }
      });
  }

  /** Aborts a run this process is driving (cancel): its model call or tool call stops at once. */
  abort(runId: string): void {
    this.active.get(runId)?.controller.abort(new Error('cancelled'));
  }

  /**
   * Stops claiming, aborts the runs in progress and hands their leases back (a wait of 0: taken at once), so the
   * next worker to look, this one after a restart included, continues them from their recorded steps.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.polling;
    const handedBack = [...this.active.entries()].map(([id, a]) => ({ id, generation: a.generation }));
    for (const a of this.active.values()) a.controller.abort(new Error('shutting down'));
    await Promise.all([...this.active.values()].map((a) => a.done));
    for (const { id, generation } of handedBack) await this.handBack(id, generation, 0);
    holderStopped(this.owner);
  }

  /** The fence of this worker's claim: the run is still running under this owner and generation. */
  private fence(generation: number): Where<RunDoc> {
    return { status: 'running', leaseOwner: this.owner, leaseGen: generation };
  }

  /** Gives a claimed run back, still `running`, for any worker to take once it has seen it so for `waitMs`. */
  private async handBack(id: string, generation: number, waitMs: number): Promise<void> {
    await this.store.transaction(async (tx) => {
      const col = tx.collection(runs);
      const doc = await col.get(id, this.fence(generation));
      if (doc) await col.update(id, this.fence(generation), { leaseWaitMs: waitMs, leaseBeat: (doc.leaseBeat ?? 0) + 1 });
    });
  }

  private async poll(): Promise<void> {
    const col = this.store.collection(runs);
    // Abandoned runs first: they have waited longest. Running runs are few (workers x concurrency).
    const running = await col.find({ status: 'running' }, { order: 'asc', limit: 100 });
    for (const doc of running.items) {
      if (this.free() === 0) return;
      if (this.active.has(doc.id)) continue;
      const { workerId } = this.options;
      const mineBefore = !this.recovered && workerId !== undefined && doc.leaseWorker === workerId && doc.leaseOwner !== this.owner;
      const holderGone = doc.leaseOwner !== null && doc.leaseOwner !== this.owner && holderIsGone(doc.leaseOwner);
      // Any change of holder, generation, beat or wait restarts this worker's wait (on its own clock).
      const beat = `${doc.leaseOwner}|${doc.leaseGen ?? 0}|${doc.leaseBeat ?? 0}|${doc.leaseWaitMs ?? ''}`;
      const waitMs = doc.leaseWaitMs ?? this.options.leaseMs;
      if (this.watch.stale(doc.id, beat, waitMs) || mineBefore || holderGone) await this.take(doc);
    }
    this.recovered = true;
    // Oldest queued run first, skipping tenants at their limit: a tenant with many slow runs waits for its own,
    // and the others' runs start at once.
    const runningOf = new Map<string, number>();
    let cursor: string | null = null;
    for (let pages = 0; pages < QUEUE_PAGES && this.free() > 0 && !this.stopped; pages++) {
      const queued = await col.find({ status: 'queued' }, { order: 'asc', limit: QUEUE_PAGE, cursor });
      for (const doc of queued.items) {
        if (this.free() === 0 || this.stopped) return;
        let count = runningOf.get(doc.tenantId);
        if (count === undefined) {
          count = (await col.find({ tenantId: doc.tenantId, status: 'running' }, { limit: this.options.tenantConcurrency })).items.length;
          runningOf.set(doc.tenantId, count);
        }
        if (count >= this.options.tenantConcurrency) continue;
        if (await this.take(doc)) runningOf.set(doc.tenantId, count + 1);
      }
      cursor = queued.nextCursor;
      if (!cursor) return;
    }
  }

  private free(): number {
    return this.options.concurrency - this.active.size;
  }

  /** Compare-and-set claim of a queued run or an abandoned running one; true when this worker now holds it. */
  private async take(doc: RunDoc): Promise<boolean> {
    const first = doc.startedAt === null;
    const attempts = doc.attempts + 1;
    const abandoned = doc.status === 'running';
    const now = nowIso();
    // The take-over is conditional on the lease exactly as seen (holder, generation, beat): a holder that beat in
    // between keeps its run.
    const where: Where<RunDoc> = abandoned
      ? { status: 'running', leaseOwner: doc.leaseOwner, leaseGen: doc.leaseGen ?? null, leaseBeat: doc.leaseBeat ?? null }
      : { status: 'queued', rev: doc.rev };
    const generation = (doc.leaseGen ?? 0) + 1;
    const giveUp = abandoned && attempts > this.options.maxAttempts;
    const patch: Partial<RunDoc> = giveUp
      ? {
          status: 'failed',
          error: `worker_lost: the run was interrupted ${doc.attempts} times (its worker stopped or died, or a service it needs did not answer)`,
          completedAt: now,
          leaseOwner: null,
          leaseWorker: null,
          leaseWaitMs: null,
          leaseGen: generation,
          rev: doc.rev + 1,
          call: null,
        }
      : {
          status: 'running',
          leaseOwner: this.owner,
          leaseWorker: this.options.workerId ?? null,
          leaseGen: generation,
          leaseBeat: 0,
          leaseWaitMs: this.options.leaseMs,
          attempts,
          startedAt: doc.startedAt ?? now,
          rev: doc.rev + 1,
        };
    const claimed = await this.store.transaction(async (tx) => {
      const updated = await tx.collection(runs).update(doc.id, where, patch);
      if (updated && giveUp) await emitRunEvent(tx, 'agent.failed', updated);
      // A run given up bills its last call from what was stored of it (or gives its reservation back).
      if (updated && giveUp && doc.call) await settleRecordedCall(tx, updated, doc.call);
      else if (updated && first) await emitRunEvent(tx, 'agent.started', updated);
      return updated;
    });
    this.watch.forget(doc.id);
    if (!claimed) return false;
    if (giveUp || first) this.relay.notify();
    if (giveUp) {
      this.logger.warn({ runId: doc.id, attempts: doc.attempts }, 'run failed: interrupted too many times');
      return false;
    }
    if (abandoned) this.logger.info({ runId: doc.id, from: doc.leaseOwner, attempt: attempts }, 'taking over an abandoned run');
    this.drive(claimed);
    return true;
  }

  private drive(doc: RunDoc): void {
    const controller = new AbortController();
    const generation = doc.leaseGen ?? 0;
    const lease: Lease = {
      run: doc,
      signal: controller.signal,
      save: (patch, events) => this.save(lease, generation, patch, events),
      publish: async (events) => {
        await this.store.transaction(events);
        this.relay.notify();
      },
      handBack: (delayMs) => this.handBack(doc.id, generation, delayMs),
      record: (call) => recorder.record(call),
    };
    const recorder = new CallRecorder((call) => this.store.collection(runs).update(doc.id, this.fence(generation), { call }), this.logger);
    // The beat doubles as the cross-process cancel check: a run cancelled elsewhere is no longer `running` here, and
    // one taken over has another generation.
    const heartbeat = setInterval(
      () => {
        this.store
          .collection(runs)
          .increment(doc.id, this.fence(generation), { leaseBeat: 1 })
          .then(
            (renewed) => {
              if (!renewed) controller.abort(new LostLease());
            },
            (err: unknown) => this.logger.warn({ err, runId: doc.id }, 'lease renewal failed'),
          );
      },
      Math.max(100, Math.floor(this.options.leaseMs / 3)),
    );
    heartbeat.unref();
    const done = driveRun(lease, this.deps)
      .catch((err: unknown) => this.logger.error({ err, runId: doc.id }, 'run loop crashed'))
      .finally(() => {
        clearInterval(heartbeat);
        this.active.delete(doc.id);
        this.notify(); // a slot is free
      });
    this.active.set(doc.id, { controller, done, generation });
  }

  /** A step, a result or a state change, with its events: committed only while the claim is still this one. */
  private async save(
    lease: Lease,
    generation: number,
    patch: Partial<RunDoc>,
    events?: (tx: StoreSession, run: RunDoc) => Promise<void>,
  ): Promise<RunDoc> {
    const next = { ...patch, rev: lease.run.rev + 1 };
    const updated = await this.store.transaction(async (tx) => {
      const doc = await tx.collection(runs).update(lease.run.id, this.fence(generation), next);
      if (doc && events) await events(tx, doc);
      return doc;
    });
    if (!updated) throw new LostLease();
    if (events) this.relay.notify();
    lease.run = updated;
    return updated;
  }
}

/** Writes a streaming call's progress one write at a time, the latest value winning (the writes in between are moot). */
class CallRecorder {
  private latest: RunCall | null = null;
  private writing: Promise<void> | null = null;

  constructor(
    private readonly write: (call: RunCall) => Promise<unknown>,
    private readonly logger: Logger,
  ) {}

  record(call: RunCall): void {
    this.latest = call;
    this.writing ??= this.drain();
  }

  private async drain(): Promise<void> {
    while (this.latest) {
      const call = this.latest;
      this.latest = null;
      await this.write(call).catch((err: unknown) => this.logger.warn({ err }, "could not store a model call's progress"));
    }
    this.writing = null;
  }
}
