/** Runs the real `svc` command as a process (packages/cli/bin/svc.js), with its own config directory. */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const BIN = resolve(__dirname, '../../packages/cli/bin/svc.js');

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface CliProcess {
  proc: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  /** Resolves once stdout matches. */
  waitFor(pattern: RegExp, ms?: number): Promise<RegExpMatchArray>;
  done: Promise<CliResult>;
}

export function cliHome(): string {
  return mkdtempSync(join(tmpdir(), 'svc-cli-home-'));
}

/** Starts `svc`: the repository's, or another (`bin`: the installed package's bin/svc.js). */
export function startCli(args: string[], env: Record<string, string>, bin = BIN): CliProcess {
  const proc = spawn(process.execPath, [bin, ...args], {
    env: { PATH: process.env.PATH, HOME: env.XDG_CONFIG_HOME ?? tmpdir(), BROWSER: 'none', ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  proc.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
  proc.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  const done = new Promise<CliResult>((ok) => proc.once('close', (code) => ok({ code, stdout, stderr })));
  return {
    proc,
    stdout: () => stdout,
    stderr: () => stderr,
    async waitFor(pattern, ms = 20_000) {
      const deadline = Date.now() + ms;
      for (;;) {
        const m = stdout.match(pattern);
        if (m) return m;
        if (Date.now() > deadline || proc.exitCode !== null) throw new Error(`svc output never matched ${pattern}:\n${stdout}\n${stderr}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    done,
  };
}

/** What leafCommands reads of a commander program (the CLI's commander, not the root's: typed by shape). */
interface CommandTree {
  name(): string;
  readonly commands: readonly CommandTree[];
}

/** Every leaf command of a commander tree, as its path ('projects list'). */
export const leafCommands = (c: CommandTree, path: string[] = []): string[] =>
  c.commands.flatMap((s) => (s.commands.length ? leafCommands(s, [...path, s.name()]) : [[...path, s.name()].join(' ')]));

export function svc(args: string[], env: Record<string, string>, input?: string): Promise<CliResult> {
  const p = startCli(args, env);
  p.proc.stdin!.end(input ?? '');
  return p.done;
}
