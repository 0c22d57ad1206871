/**
 * Jars from Maven Central for the suites that drive a Java program for real (the Kafka broker, Helm through
 * helm-java): Maven resolves a pom's dependencies once into its local repository; the classpath it reports is kept
 * beside the pom's hash, so later calls only check that the jars are still there. Where `java` or `mvn` is missing,
 * the Debian packages are installed when running as root; otherwise it stops at once naming them.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ensurePackages } from '../setup/system-packages';

/** What running a Java program needs: Debian package -> executable. */
export const JAVA_TOOLS = { 'default-jre-headless': 'java', maven: 'mvn' };

/** The classpath of `pom`'s dependencies (`what` names it in errors); `cacheDir` keeps the answer. */
export function mavenClasspath(pom: string, cacheDir: string, what: string): string {
  const hash = createHash('sha256').update(readFileSync(pom)).digest('hex').slice(0, 16);
  const kept = join(cacheDir, `classpath-${hash}.txt`);
  if (existsSync(kept)) {
    const cp = readFileSync(kept, 'utf8').trim();
    if (cp && cp.split(':').every((jar) => existsSync(jar))) return cp;
  }
  ensurePackages(JAVA_TOOLS);
  mkdirSync(cacheDir, { recursive: true });
  const out = join(cacheDir, `classpath-${hash}.tmp`);
  const res = spawnSync('mvn', ['-q', '-B', '-f', pom, 'dependency:build-classpath', `-Dmdep.outputFile=${out}`], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  if (res.status !== 0) throw new Error(`Maven could not resolve ${what} (${pom}):\n${(res.stdout + res.stderr).slice(-2000)}`);
  const cp = readFileSync(out, 'utf8').trim();
  writeFileSync(kept, cp);
  rmSync(out, { force: true });
  return cp;
}
