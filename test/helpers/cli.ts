/**
 * Runs the real `svc` command as a process, with its own config directory: the CLI's source bundled once per test
 * process with esbuild, as the published package's dist/svc.cjs is (scripts/release-pack.mjs). A checkout's
 * bin/svc.js runs the same source through tsx, which costs each start ~0.15 s of CPU more, paid some hundred times by
 * the CLI suites; `SOURCE_BIN`, that launcher, is run as well (cli.test.ts).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { buildSync } from 'esbuild';

const CLI = resolve(__dirname, '../../packages/cli');
/** What `npx svc` runs in a checkout. */
export const SOURCE_BIN = join(CLI, 'bin/svc.js');

let bundled: string | undefined;
/** The bundle, built on first use; beside it a copy of the manifest, where the CLI reads its version. */
function bundle(): string {
  if (bundled) return bundled;
  const dir = mkdtempSync(join(tmpdir(), 'svc-cli-bundle-'));
  mkdirSync(join(dir, 'dist'));
  copyFileSync(join(CLI, 'package.json'), join(dir, 'package.json'));
  const main = join(dir, 'dist/main.cjs');
  buildSync({
    entryPoints: [join(CLI, 'src/main.ts')],
    outfile: main,
    bundle: true,
    format: 'cjs',
    platform: 'node',
    target: 'node20',
    tsconfig: resolve(__dirname, '../../tsconfig.json'),
    logLevel: 'warning',
    footer: { js: 'module.exports.run(process.argv, process.env).then((code) => { process.exitCode = code; });' },
  });
  return (bundled = main);
}

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

/** Starts `svc`: the repository's (bundled), or another (`bin`: the installed package's bin/svc.js). */
export function startCli(args: string[], env: Record<string, string>, bin?: string): CliProcess {
  const proc = spawn(process.execPath, [bin ?? bundle(), ...args], {
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
