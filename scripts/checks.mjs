/**
 * `npm test`'s checks before Jest, two at a time (the CI machine has two cores): the type checks beside eslint and
 * prettier, then the generated-code and lockfile checks. Beside the first two, the test set-up's downloads (Debian
 * packages, the Kafka broker's jars: test/setup/prepare.ts), which wait on the network more than on a core. Each
 * one's output is printed whole when it ends; the first failure fails the run once every check has ended.
 */
import { spawn } from 'node:child_process';

const npmRun = (script) => ({ name: script, command: 'npm', args: ['run', '--silent', script] });
const PREPARE = { name: 'test set-up downloads', command: process.execPath, args: ['--import', 'tsx', 'test/setup/prepare.ts'] };

const WAVES = [
  [npmRun('typecheck'), npmRun('lint'), PREPARE],
  [npmRun('proto:check'), npmRun('sdk:check'), npmRun('lockfile:check')],
];

function run({ name: script, command, args }) {
  return new Promise((resolve) => {
    const started = Date.now();
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (out += c));
    child.on('close', (code) => {
      process.stdout.write(
        `--- ${script}: ${code === 0 ? 'ok' : `failed (${code})`} in ${((Date.now() - started) / 1000).toFixed(1)} s\n${out}`,
      );
      resolve(code === 0);
    });
  });
}

let ok = true;
for (const wave of WAVES) ok = (await Promise.all(wave.map(run))).every(Boolean) && ok;
process.exit(ok ? 0 : 1);
