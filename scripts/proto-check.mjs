// Fails when the committed generated code in packages/proto/src differs from what `npm run proto` makes.
import { execSync } from 'node:child_process';
import { mkdtempSync, cpSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const out = 'packages/proto/src';
const backup = mkdtempSync(join(tmpdir(), 'proto-check-'));
cpSync(out, backup, { recursive: true });
try {
  execSync('npm run --silent proto', { stdio: 'inherit' });
  execSync(`diff -r ${backup} ${out}`, { stdio: 'inherit' });
  console.log('proto: generated code is up to date');
} catch {
  cpSync(backup, out, { recursive: true });
  console.error('proto: generated code is stale or buf lint failed; run `npm run proto` and commit the result');
  process.exit(1);
} finally {
  rmSync(backup, { recursive: true, force: true });
}
