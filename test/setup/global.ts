/**
 * Jest global set-up: the Debian packages the suites drive (system-packages.ts), then the compiled entries that
 * `npm start` runs (scripts/build.mjs, skipped when nothing changed), which the process-level suites start.
 */
import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import installSystemPackages from './system-packages';

export default function globalSetup(): void {
  installSystemPackages();
  execFileSync(process.execPath, [resolve(__dirname, '../../scripts/build.mjs')], { stdio: 'inherit' });
}
