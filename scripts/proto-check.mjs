// Fails when the committed generated code in packages/proto/src differs from what `npm run proto` makes.
import { execSync } from 'node:child_process';
import { mkdtempSync, cpSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const out = 'packages/proto/src';
const hasMain = () => {
  try {
    execSync('git rev-parse --verify -q main', { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
};
const backup = mkdtempSync(join(tmpdir(), 'proto-check-'));
cpSync(out, backup, { recursive: true });
try {
  execSync('npm run --silent proto', { stdio: 'inherit' });
  execSync(`diff -r ${backup} ${out}`, { stdio: 'inherit' });
  console.log('proto: generated code is up to date');
  // Wire compatibility against main's contracts (a no-op on main itself; it guards branches).
  if (hasMain()) {
    execSync("npx buf breaking proto --against '.git#branch=main,subdir=proto'", { stdio: 'inherit' });
    console.log('proto: no breaking change against main');
  }
} catch {
  cpSync(backup, out, { recursive: true });
  console.error('proto: generated code is stale or buf lint failed; run `npm run proto` and commit the result');
  process.exit(1);
} finally {
  rmSync(backup, { recursive: true, force: true });
}
