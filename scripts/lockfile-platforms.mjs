#!/usr/bin/env node
/**
 * Completes package-lock.json with the per-platform optional packages that the registry mirror of these machines
 * does not serve (darwin and win32 builds of @bufbuild/buf, @swc/core, unrs-resolver, ...). npm drops what it
 * cannot fetch, and `npm ci` then refuses the lockfile ("Missing: ... from lock file") on every machine.
 *
 * Each missing optional dependency gets an entry with its exact version and the os/cpu/libc that its name states,
 * so npm skips it on other platforms without a download and fetches it where it applies. The mirror gives no
 * tarball, so these entries carry no integrity hash. `--check` only reports (exit 1 when something is missing).
 */
import { readFileSync, writeFileSync } from 'node:fs';

const OS = ['darwin', 'linux', 'win32', 'freebsd', 'android', 'openbsd', 'sunos', 'aix', 'netbsd', 'openharmony'];
const CPU = {
  arm64: 'arm64',
  aarch64: 'arm64',
  x64: 'x64',
  ia32: 'ia32',
  arm: 'arm',
  armv7: 'arm',
  'arm-eabi': 'arm',
  ppc64: 'ppc64',
  s390x: 's390x',
  riscv64: 'riscv64',
  loong64: 'loong64',
  wasm32: 'wasm32',
};

function platformOf(name) {
  const tokens = name.split('/').pop().split('-');
  const out = {};
  const os = tokens.find((t) => OS.includes(t));
  if (os) out.os = [os];
  const cpu = tokens.find((t) => t in CPU);
  if (cpu) out.cpu = [CPU[cpu]];
  if (tokens.includes('musl')) out.libc = ['musl'];
  else if (tokens.includes('gnu') || tokens.includes('gnueabihf')) out.libc = ['glibc'];
  return out;
}

const file = new URL('../package-lock.json', import.meta.url);
const lock = JSON.parse(readFileSync(file, 'utf8'));
const packages = lock.packages;
const added = [];
for (const [path, entry] of Object.entries(packages)) {
  for (const [dep, version] of Object.entries(entry.optionalDependencies ?? {})) {
    // Resolution as node does it: next to the dependant first, then at the top.
    const nested = `${path ? `${path}/` : ''}node_modules/${dep}`;
    const top = `node_modules/${dep}`;
    if (packages[nested] || packages[top]) continue;
    if (!/^\d+\.\d+\.\d+(-[\w.]+)?$/.test(version)) continue; // only exact pins are completed
    packages[top] = { version, ...platformOf(dep), optional: true, ...(entry.dev ? { dev: true } : {}) };
    added.push(`${dep}@${version}`);
  }
}
if (process.argv.includes('--check')) {
  if (added.length) {
    console.error(
      `package-lock.json lacks ${added.length} optional platform package(s): ${added.join(', ')}\nRun: node scripts/lockfile-platforms.mjs`,
    );
    process.exit(1);
  }
  process.exit(0);
}
if (added.length) {
  lock.packages = Object.fromEntries(
    Object.entries(packages).sort(([a], [b]) => (a === '' ? -1 : b === '' ? 1 : a < b ? -1 : a > b ? 1 : 0)),
  );
  writeFileSync(file, `${JSON.stringify(lock, null, 2)}\n`);
}
console.log(added.length ? `added ${added.length} entries: ${added.join(', ')}` : 'package-lock.json is complete');
