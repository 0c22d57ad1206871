/**
 * Supervision for the embedded default: a child that exits after it was ready is started again, with backoff, on the
 * same settings (so on the same port, and peers reconnect). One part dying never stops the system; the launcher's
 * own SIGTERM/SIGINT still stops everything. In Kubernetes the kubelet plays this role for each pod.
 */
import { fork, type ChildProcess } from 'node:child_process';
import type { Logger } from '@svc/kit';
import { PEERS_READY_MESSAGE } from '@svc/kit/peers';

export interface ChildSpec {
  name: string;
  /** Absolute path of the entry file. */
  entry: string;
  /** Arguments after the entry. */
  args?: string[];
  env: NodeJS.ProcessEnv;
  execArgv: string[];
  cwd: string;
  /**
   * Started with SVC_WAIT_FOR_PEERS=1 alongside the services (kit peers.ts): told `peers-ready` once this settles,
   * a restarted child at once.
   */
  peers?: Promise<unknown>;
}

export interface BackoffPolicy {
  /** First restart delay. */
  initialMs: number;
  maxMs: number;
  /** A child that stayed up this long has its backoff reset. */
  stableMs: number;
}

export const DEFAULT_BACKOFF: BackoffPolicy = { initialMs: 250, maxMs: 30_000, stableMs: 60_000 };

/** Delay before restart number `attempt` (1-based): doubling from initialMs, capped at maxMs. */
export function restartDelay(attempt: number, policy: BackoffPolicy = DEFAULT_BACKOFF): number {
  return Math.min(policy.maxMs, policy.initialMs * 2 ** Math.max(0, attempt - 1));
}

export class SupervisedChild {
  proc: ChildProcess | null = null;
  private attempts = 0;
  private startedAt = 0;
  private restartTimer: NodeJS.Timeout | null = null;
  private stopped = false;

  constructor(
    readonly spec: ChildSpec,
    private readonly logger: Logger,
    private readonly policy: BackoffPolicy = DEFAULT_BACKOFF,
  ) {}

  /** Starts the child; resolves with its port once it reports ready, rejects if it exits first (fail fast). */
  start(timeoutMs = 60_000): Promise<number> {
    return new Promise((ok, fail) => {
      const proc = this.spawn();
      const timer = setTimeout(() => fail(new Error(`${this.spec.name} did not become ready within ${timeoutMs / 1000} s`)), timeoutMs);
      const onMessage = (m: { type?: string; port?: number }) => {
        if (m?.type !== 'ready') return;
        clearTimeout(timer);
        proc.off('exit', onEarlyExit);
        this.watch(proc);
        ok(m.port!);
      };
      const onEarlyExit = (code: number | null, signal: NodeJS.Signals | null) => {
        clearTimeout(timer);
        proc.off('message', onMessage);
        fail(Object.assign(new Error(`${this.spec.name} exited with ${code ?? signal} before it was ready`), { exitCode: code }));
      };
      proc.on('message', onMessage);
      proc.once('exit', onEarlyExit);
    });
  }

  /** Stops the child (SIGTERM, then SIGKILL after graceMs) and never restarts it again. */
  async stop(graceMs = 10_000): Promise<void> {
    this.stopped = true;
    if (this.restartTimer) clearTimeout(this.restartTimer);
    const proc = this.proc;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    await new Promise<void>((done) => {
      const force = setTimeout(() => proc.kill('SIGKILL'), graceMs);
      proc.once('exit', () => {
        clearTimeout(force);
        done();
      });
      proc.kill('SIGTERM');
    });
  }

  private spawn(): ChildProcess {
    const { entry, args = [], env, execArgv, cwd } = this.spec;
    const proc = fork(entry, args, { cwd, env, execArgv, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    this.proc = proc;
    this.spec.peers?.then(
      () => proc.connected && proc.send(PEERS_READY_MESSAGE),
      () => undefined, // the services failed: the launcher stops everything
    );
    this.startedAt = Date.now();
    return proc;
  }

  /** After the first ready: every exit that the launcher did not ask for is followed by a restart. */
  private watch(proc: ChildProcess): void {
    proc.once('exit', (code, signal) => {
      if (this.stopped) return;
      if (Date.now() - this.startedAt >= this.policy.stableMs) this.attempts = 0;
      this.attempts += 1;
      const delayMs = restartDelay(this.attempts, this.policy);
      this.logger.error({ service: this.spec.name, code, signal, attempt: this.attempts, delayMs }, `${this.spec.name} exited; restarting`);
      this.restartTimer = setTimeout(() => this.restart(), delayMs);
    });
  }

  private restart(): void {
    if (this.stopped) return;
    this.start().then(
      (port) => this.logger.info({ service: this.spec.name, port, attempt: this.attempts }, `${this.spec.name} restarted`),
      (err: Error) => {
        // Exited again before ready: try again later, with a longer wait.
        this.logger.error({ service: this.spec.name, err: err.message }, `${this.spec.name} failed to restart`);
        if (this.stopped) return;
        this.attempts += 1;
        this.restartTimer = setTimeout(() => this.restart(), restartDelay(this.attempts, this.policy));
      },
    );
  }
}
