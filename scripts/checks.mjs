/**
 * `npm test`: the checks, then Jest beside the last of them. The checks (the two tsc passes, eslint, prettier, the
 * SDK, proto and lockfile checks; npm scripts split at their `&&`) come from a queue, the slowest first, on the CI
 * machine's two cores: a check that ends frees its core for the next at once. The test set-up's downloads (Debian
 * packages, the Kafka broker's jars: test/setup/prepare.ts), which wait on the network more than on a core, run beside
 * the queue from the start. Jest starts as soon as they are done, and the queue then goes on one check at a time:
 * Jest's suites leave a core idle about a tenth of their time (waits on brokers, timers and restarts), which the
 * checks fill, instead of running first on their own. Each check's output is printed whole when it ends; the run fails
 * when any check or Jest failed, once all have ended.
 *
 *   node scripts/checks.mjs              the checks only
 *   node scripts/checks.mjs --jest ...   the checks and Jest (what follows --jest goes to Jest)
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const SCRIPTS = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts;
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

const PATH = `${join(ROOT, 'node_modules/.bin')}:${process.env.PATH}`;

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

const jestAt = process.argv.indexOf('--jest');
const jestArgs = jestAt >= 0 ? process.argv.slice(jestAt + 1) : null;

/** Jest with the terminal as its own (its progress as it goes); resolves true when it passed. */
function jest(args) {
  return new Promise((resolve) => {
    const child = spawn('jest', args, { stdio: 'inherit', env: { ...process.env, PATH } });
    child.on('close', (code) => resolve(code === 0));
  });
}

const queue = [...QUEUE];
let jestStarted = false;
/** Slot `slot` of the queue; once Jest runs, only slot 0 takes another check. */
async function worker(slot) {
  let ok = true;
  for (let next = queue.shift(); next; next = slot === 0 || !jestStarted ? queue.shift() : undefined) ok = (await run(next)) && ok;
  return ok;
}

const started = Date.now();
const prepared = run(PREPARE);
const checks = Promise.all(Array.from({ length: CORES }, (_, slot) => worker(slot)));
const tests = jestArgs
  ? prepared.then(() => {
      jestStarted = true;
      process.stdout.write(`--- jest started after ${((Date.now() - started) / 1000).toFixed(1)} s; checks left: ${queue.length}\n`);
      return jest(jestArgs);
    })
  : Promise.resolve(true);
const results = [await prepared, ...(await checks), await tests];
process.stdout.write(`--- ${jestArgs ? 'checks and jest' : 'checks'}: ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
process.exit(results.every(Boolean) ? 0 : 1);
