import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import { logLevel } from 'kafkajs';
import { kafkaSecurity, loadConfig, commonConfig, type KafkaSecurity } from '../config';
import { connectionProblem } from '../connection-problem';
import { busContract } from './bus.contract';
import { openKafkaBus } from './kafka';
import { kafkaClient } from './kafka-client';
import { kafkaDeadLetters } from './kafka-dead-letters';
import { secureTestKafka, type SecureKafka } from '../../../../test/kafka/env';

// Issue 33 (2): the bus over TLS and SASL, against the SASL_SSL listener of the run's broker (test/kafka/secure.ts),
// with a CA and a SCRAM user the set-up made. The settings are read as a service reads them (KAFKA_SSL, ...).
jest.setTimeout(60_000);

let kafka: SecureKafka;
beforeAll(async () => {
  kafka = await secureTestKafka();
});
afterAll(() => kafka?.release());

/** A service's Kafka security from its environment, through the config object it loads at start. */
function security(env: Record<string, string>): KafkaSecurity {
  return kafkaSecurity(
    loadConfig(commonConfig, { KAFKA_SSL: 'true', KAFKA_SSL_CA_FILE: kafka.caFile, KAFKA_SASL_USERNAME: kafka.username, ...env }),
  );
}
const scram256 = () => security({ KAFKA_SASL_MECHANISM: 'scram-sha-256', KAFKA_SASL_PASSWORD: kafka.password });

describe('kafka over SASL_SSL', () => {
  // What the connection decides, again over TLS and SCRAM; the consumer's logic ran over plaintext (kafka.test.ts).
  busContract(
    'kafka over SASL_SSL (SCRAM-SHA-256)',
    async (options) => openKafkaBus({ ...scram256(), brokers: kafka.brokers, clientId: 'kit-secure-test', ...options }),
    'wire',
  );

  test.each(['scram-sha-512', 'plain'])('signs in with %s', async (mechanism) => {
    const bus = openKafkaBus({
      ...security({ KAFKA_SASL_MECHANISM: mechanism, KAFKA_SASL_PASSWORD: kafka.password }),
      brokers: kafka.brokers,
      clientId: 'kit-secure-test',
    });
    try {
      await expect(bus.ping()).resolves.toBeUndefined();
    } finally {
      await bus.close();
    }
  });

  test('a wrong password fails at once, and every ping after says why', async () => {
    const bus = openKafkaBus({
      ...security({ KAFKA_SASL_MECHANISM: 'scram-sha-256', KAFKA_SASL_PASSWORD: 'not-the-password' }),
      brokers: kafka.brokers,
      clientId: 'kit-secure-test',
    });
    try {
      for (let i = 0; i < 3; i++) {
        const err = await bus.ping().then(
          () => null,
          (e: unknown) => e,
        );
        expect(err).toMatchObject({ name: 'KafkaJSSASLAuthenticationError' });
        expect(connectionProblem('Kafka', err)).toEqual({
          kind: 'credentials',
          misconfigured: true,
          reason: 'Kafka: authentication failed (check KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD)',
        });
      }
    } finally {
      await bus.close();
    }
  });

  test('a broker whose certificate the configured CA did not sign is refused, and pings come to say so', async () => {
    const bus = openKafkaBus({
      ...security({ KAFKA_SSL_CA_FILE: kafka.otherCaFile, KAFKA_SASL_MECHANISM: 'scram-sha-256', KAFKA_SASL_PASSWORD: kafka.password }),
      brokers: kafka.brokers,
      clientId: 'kit-secure-test',
    });
    try {
      // The first attempt spends kafkajs's retries; the pings meanwhile time out, and once it has failed, they
      // answer with its cause.
      const deadline = Date.now() + 30_000;
      let kind = '';
      while (kind !== 'certificate' && Date.now() < deadline) {
        kind = await bus.ping().then(
          () => 'connected',
          (err: unknown) => connectionProblem('Kafka', err).kind,
        );
        if (kind === 'connected') break;
        await new Promise((r) => setTimeout(r, 250));
      }
      expect(kind).toBe('certificate');
    } finally {
      await bus.close();
    }
  });

  test('the dead letters are read over it too', async () => {
    const letters = kafkaDeadLetters({ ...scram256(), brokers: kafka.brokers, clientId: 'kit-secure-test-dlq' });
    try {
      expect(Array.isArray(await letters.list(`no-such-group-${randomUUID()}`))).toBe(true);
    } finally {
      await letters.close();
    }
  });

  test('`npm run kafka:topics` creates the topics over it', async () => {
    const namespace = `secure${randomUUID().slice(0, 8)}`;
    const env = {
      PATH: process.env.PATH ?? '',
      KAFKA_BROKERS: kafka.brokers.join(','),
      KAFKA_NAMESPACE: namespace,
      KAFKA_PARTITIONS: '1',
      KAFKA_SSL: 'true',
      KAFKA_SSL_CA_FILE: kafka.caFile,
      KAFKA_SASL_MECHANISM: 'scram-sha-512',
      KAFKA_SASL_USERNAME: kafka.username,
      KAFKA_SASL_PASSWORD: kafka.password,
    };
    const proc = spawn(process.execPath, ['dist/kafka-topics.js'], {
      cwd: resolve(__dirname, '../../../..'),
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    proc.stdout.on('data', (c: Buffer) => (output += c.toString()));
    proc.stderr.on('data', (c: Buffer) => (output += c.toString()));
    const code = await new Promise<number | null>((done) => proc.once('exit', done));
    expect({ code, output }).toEqual({ code: 0, output: expect.stringMatching(/\d+ topics ready/) });
    const admin = kafkaClient({
      ...scram256(),
      brokers: kafka.brokers,
      clientId: 'kit-secure-test-admin',
      logLevel: logLevel.NOTHING,
    }).admin();
    await admin.connect();
    try {
      const created = (await admin.listTopics()).filter((t) => t.startsWith(`${namespace}.`));
      expect(created.length).toBeGreaterThan(0);
      await admin.deleteTopics({ topics: created });
    } finally {
      await admin.disconnect();
    }
  });
});
