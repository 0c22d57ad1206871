/**
 * `npm test`'s checks before Jest, two at a time (the CI machine has two cores), from a queue rather than in waves:
 * a check that ends frees its core for the next one at once, so a slow one no longer holds back a wave. The npm
 * scripts `typecheck` and `lint` are split at their `&&` into their commands (the two tsc passes, eslint, prettier),
 * which queue separately, the slowest first. The test set-up's downloads (Debian packages, the Kafka broker's jars:
 * test/setup/prepare.ts), which wait on the network more than on a core, run beside the queue from the start. Each
 * one's output is printed whole when it ends; the first failure fails the run once every check has ended.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';

const SCRIPTS = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).scripts;
const CORES = 2;

/** An npm script's `&&`-joined commands, each run through the shell as npm would run it (node_modules/.bin on PATH). */
const commandsOf = (script) =>
  SCRIPTS[script].split(' && ').map((command, i, all) => ({
    name: all.length > 1 ? `${script}: ${command}` : script,
    command: 'sh',
    args: ['-c', command],
  }));

const PREPARE = { name: 'test set-up downloads', command: process.execPath, args: ['--import', 'tsx', 'test/setup/prepare.ts'] };

/** CPU seconds on the dev box, to start the slowest first; a command not named here goes last. */
const COST = {
  'tsc -p tsconfig.json --noEmit': 22,
  'prettier --check .': 19,
  'eslint .': 12,
  'node --import tsx scripts/sdk-generate.ts --check': 6,
  'node scripts/proto-check.mjs': 5,
  'tsc -p gateway/console/tsconfig.json': 4,
};
const QUEUE = ['typecheck', 'lint', 'sdk:check', 'proto:check', 'lockfile:check']
  .flatMap(commandsOf)
  .sort((a, b) => (COST[b.args[1]] ?? 0) - (COST[a.args[1]] ?? 0));

const PATH = `${new URL('../node_modules/.bin', import.meta.url).pathname}:${process.env.PATH}`;

function run({ name, command, args }) {
  return new Promise((resolve) => {
    const started = Date.now();
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, PATH } });
    let out = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (out += c));
    child.on('close', (code) => {
      process.stdout.write(
        `--- ${name}: ${code === 0 ? 'ok' : `failed (${code})`} in ${((Date.now() - started) / 1000).toFixed(1)} s\n${out}`,
      );
      resolve(code === 0);
    });
  });
}

const queue = [...QUEUE];
async function worker() {
  let ok = true;
  for (let next = queue.shift(); next; next = queue.shift()) ok = (await run(next)) && ok;
  return ok;
}

const started = Date.now();
const results = await Promise.all([run(PREPARE), ...Array.from({ length: CORES }, worker)]);
process.stdout.write(`--- checks: ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
process.exit(results.every(Boolean) ? 0 : 1);
