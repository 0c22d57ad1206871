/**
 * A broker with a SASL_SSL listener beside its PLAINTEXT one: the certificates are made in its data directory, and
 * one user may sign in with SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN. The global set-up starts the run's broker this way
 * (every other suite keeps to PLAINTEXT); test/kafka/env.ts's secureTestKafka hands the listener to a suite.
 */
import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeTestCertificates } from '../helpers/tls';
import { startKafkaBroker, type KafkaBroker, type StartBrokerOptions } from './broker';
import type { SecureKafka } from './env';

export const SECURE_USER = { name: 'svc-test', password: 'svc-test-secret-0123' };

export async function startSecureKafkaBroker(
  options: Omit<StartBrokerOptions, 'secure' | 'dataDir'> = {},
): Promise<{ broker: KafkaBroker; secure: Omit<SecureKafka, 'release'> }> {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-kafka-'));
  const tlsDir = join(dataDir, 'tls');
  mkdirSync(tlsDir);
  const certs = makeTestCertificates(tlsDir);
  const broker = await startKafkaBroker({
    ...options,
    dataDir,
    ownsDataDir: true,
    secure: { keystoreFile: certs.keystoreFile, users: [SECURE_USER] },
  });
  return {
    broker,
    secure: {
      brokers: [broker.secureBrokers!],
      caFile: certs.caFile,
      otherCaFile: certs.otherCaFile,
      username: SECURE_USER.name,
      password: SECURE_USER.password,
    },
  };
}
