/**
 * Jest global set-up: the Debian packages the suites drive (system-packages.ts), a real Kafka broker for the Kafka
 * suites (test/kafka/broker.ts; its address goes to the workers as TEST_KAFKA_BROKERS, or KAFKA_BROKERS is used
 * when set; its SASL_SSL listener as TEST_KAFKA_SECURE), and the compiled entries that `npm start` runs (scripts/build.mjs, skipped when nothing changed),
 * which the process-level suites start. The broker starts while the build runs.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { promisify } from 'node:util';
import type { KafkaBroker } from '../kafka/broker';
import { SECURE_KAFKA_ENV } from '../kafka/env';
import { startSecureKafkaBroker } from '../kafka/secure';
import installSystemPackages from './system-packages';

declare global {
  var svcTestKafka: KafkaBroker | undefined;
}

/** The broker of a run that was killed before its teardown (jest SIGKILLed): stopped by the next run. */
export const BROKER_PID_FILE = resolve(__dirname, '../../node_modules/.cache/svc-kafka/test-broker.pid');

function stopLeftoverBroker(): void {
  if (!existsSync(BROKER_PID_FILE)) return;
  const pid = Number(readFileSync(BROKER_PID_FILE, 'utf8'));
  try {
    if (pid > 0 && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('kafka.Kafka')) process.kill(pid, 'SIGKILL');
  } catch {
    // gone already
  }
  rmSync(BROKER_PID_FILE, { force: true });
}

export default async function globalSetup(): Promise<void> {
  installSystemPackages();
  stopLeftoverBroker();
  const external = process.env.KAFKA_BROKERS;
  // With a SASL_SSL listener beside the PLAINTEXT one every other suite uses (test/kafka/secure.ts).
  const broker = external ? undefined : startSecureKafkaBroker();
  await promisify(execFile)(process.execPath, [resolve(__dirname, '../../scripts/build.mjs')]).then(
    ({ stdout, stderr }) => process.stderr.write(stdout + stderr),
    (err: Error & { stdout?: string; stderr?: string }) => {
      throw new Error(`scripts/build.mjs failed: ${err.stdout ?? ''}${err.stderr ?? err.message}`);
    },
  );
  if (broker) {
    const started = await broker;
    globalThis.svcTestKafka = started.broker;
    mkdirSync(dirname(BROKER_PID_FILE), { recursive: true });
    writeFileSync(BROKER_PID_FILE, String(started.broker.pid));
    process.env.TEST_KAFKA_BROKERS = started.broker.brokers;
    process.env[SECURE_KAFKA_ENV] = JSON.stringify(started.secure);
  } else {
    process.env.TEST_KAFKA_BROKERS = external;
  }
}
