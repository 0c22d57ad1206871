/**
 * Jest global set-up: the Debian packages the suites drive for real (redis-server, chromium, a JRE and Maven for
 * the Kafka broker, openssl for the test certificates) are installed when missing, so `npm test` alone passes on a
 * fresh Debian machine. Without root or apt-get it stops at once and names the packages and the command; it never
 * lets the suites that need them skip silently.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

/** Debian package -> the executable the tests start. */
export const TEST_PACKAGES: Record<string, string> = {
  'redis-server': 'redis-server',
  // Certificates for the TLS listeners of the Kafka broker and Redis (test/helpers/tls.ts).
  openssl: 'openssl',
  chromium: '/usr/bin/chromium',
  'default-jre-headless': 'java',
  maven: 'mvn',
};

function present(executable: string): boolean {
  if (executable.startsWith('/')) return existsSync(executable);
  return spawnSync('sh', ['-c', `command -v ${executable}`], { stdio: 'ignore' }).status === 0;
}

export function missingPackages(needed: Record<string, string> = TEST_PACKAGES): string[] {
  return Object.entries(needed)
    .filter(([, executable]) => !present(executable))
    .map(([pkg]) => pkg);
}

/** Installs the missing ones with apt-get when running as root; otherwise throws naming them. */
export function ensurePackages(needed: Record<string, string>): void {
  const missing = missingPackages(needed);
  if (missing.length === 0) return;
  const command = `apt-get install -y ${missing.join(' ')}`;
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  if (!isRoot || !present('apt-get')) {
    throw new Error(`The tests need Debian package(s) ${missing.join(', ')}. Install them with: sudo ${command}`);
  }
  process.stderr.write(`\ntest set-up: installing ${missing.join(', ')} (${command})\n`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  try {
    execFileSync('apt-get', ['update', '-qq'], { stdio: ['ignore', 'ignore', 'inherit'], env });
    execFileSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...missing], {
      stdio: ['ignore', 'ignore', 'inherit'],
      env,
    });
  } catch (err) {
    throw new Error(`Installing ${missing.join(', ')} failed (${(err as Error).message}). Install them with: ${command}`);
  }
  const still = missingPackages(needed);
  if (still.length)
    throw new Error(`After apt-get, still missing: ${still.join(', ')}. Install them with: apt-get install -y ${still.join(' ')}`);
}

export default function installSystemPackages(): void {
  ensurePackages(TEST_PACKAGES);
}
