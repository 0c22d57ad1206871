import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { TEST_SYSTEM_ENV } from './system-env';

export interface SystemProcess {
  url: string;
  proc: ChildProcess;
  output: () => string;
  /** SIGTERM and wait for a clean exit; resolves with the exit code. */
  stop(): Promise<number | null>;
  /** SIGKILL to the whole process group: the launcher and every service, with no chance to clean up. */
  kill(): Promise<void>;
  /**
   * SIGKILL to one process only: a service's own (`SVC_LAYOUT=per-service`), or `services` for the process that
   * hosts them all (the default layout); resolves with the killed pid at once.
   */
  killService(name: string): Promise<number>;
  /** Pids of the processes running that part (several with REPLICAS). */
  pids(name: string): number[];
  /** Resolves once the launcher has restarted `name` after `killedPid` (a new process reported ready). */
  restarted(name: string, killedPid: number): Promise<void>;
  /** Resolves with the launcher's exit code. */
  exited: Promise<number | null>;
}

/** Pids of the direct children of `ppid` whose command line contains `match` (read from /proc). */
export function childPids(ppid: number, match: string): number[] {
  const out: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (parent === ppid && readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(match)) out.push(Number(entry));
    } catch {
      // the process ended while we looked
    }
  }
  return out;
}

const ROOT = resolve(__dirname, '../..');

/** The command line that marks a part's process: the services host, or one service's own bundle (dist/). */
function entryOf(name: string): string {
  if (name === 'gateway') return 'dist/gateway.js';
  return name === 'services' ? 'dist/services.js' : `dist/services/${name}.js`;
}

/**
 * Runs `npm start`'s launcher as a user would (the compiled `dist/start.js`, built by the jest global set-up as
 * `npm start` builds it), in its own process group, and waits for "system ready".
 */
export async function startSystem(env: Record<string, string>): Promise<SystemProcess> {
  // Port 0 unless the test needs a given one: the gateway takes a port from the kernel's ephemeral range, which no
  // launcher's pick (below it) and no other test can be handed at the same moment; the URL is read from the ready line.
  const port = env.PORT ?? '0';
  const proc = spawn(process.execPath, ['--enable-source-maps', 'dist/start.js'], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, LOG_LEVEL: 'info', ...TEST_SYSTEM_ENV, ...env, PORT: port },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let out = '';
  let url = '';
  proc.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  proc.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  const exited = new Promise<number | null>((ok) => proc.once('exit', (code) => ok(code)));
  await new Promise<void>((ok, fail) => {
    const timer = setTimeout(() => {
      // Leave no orphaned services behind a failed start.
      try {
        process.kill(-proc.pid!, 'SIGKILL');
      } catch {
        // already gone
      }
      fail(new Error(`system not ready in 60 s:\n${out.slice(-3000)}`));
    }, 60_000);
    const check = () => {
      const ready = /system ready at (http:\/\/[^"\s]+)/.exec(out);
      if (ready) {
        url = ready[1];
        clearTimeout(timer);
        ok();
      }
    };
    proc.stdout!.on('data', check);
    void exited.then((code) => {
      clearTimeout(timer);
      fail(new Error(`system exited (${code}) before ready:\n${out.slice(-3000)}`));
    });
  });
  return {
    url,
    proc,
    output: () => out,
    async stop() {
      process.kill(proc.pid!, 'SIGTERM');
      return exited;
    },
    async kill() {
      process.kill(-proc.pid!, 'SIGKILL');
      await exited;
      // Give the OS a moment to release the listening ports of the killed group.
      await new Promise((r) => setTimeout(r, 200));
    },
    async killService(name: string) {
      const pids = childPids(proc.pid!, entryOf(name));
      if (pids.length !== 1) throw new Error(`expected one ${name} process, found ${pids.length}`);
      process.kill(pids[0], 'SIGKILL');
      return pids[0];
    },
    pids: (name: string) => childPids(proc.pid!, entryOf(name)),
    async restarted(name: string, killedPid: number) {
      const deadline = Date.now() + 60_000;
      while (Date.now() < deadline) {
        // The restart's log line comes after the launcher's line about the exit.
        const mark = out.lastIndexOf(`${name} exited; restarting`);
        const pids = childPids(proc.pid!, entryOf(name));
        if (mark >= 0 && pids.length === 1 && pids[0] !== killedPid && out.slice(mark).includes(`${name} restarted`)) return;
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new Error(`${name} was not restarted within 60 s:\n${out.slice(-3000)}`);
    },
    exited,
  };
}
