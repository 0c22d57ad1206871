/**
 * `npm test`'s checks before Jest, two at a time (the CI machine has two cores): the type checks beside eslint and
 * prettier, then the generated-code and lockfile checks. Each one's output is printed whole when it ends; the first
 * failure fails the run once every check has ended.
 */
import { spawn } from 'node:child_process';

const WAVES = [
  ['typecheck', 'lint'],
  ['proto:check', 'sdk:check', 'lockfile:check'],
];

function run(script) {
  return new Promise((resolve) => {
    const started = Date.now();
    const child = spawn('npm', ['run', '--silent', script], { stdio: ['ignore', 'pipe', 'pipe'] });
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
