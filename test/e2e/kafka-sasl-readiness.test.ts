import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { secureTestKafka, type SecureKafka } from '../kafka/env';
import { client, eventually, signUp, type Res } from '../helpers/http';
import { startSystem, type SystemProcess } from '../helpers/process';

// Issue 33 (2): Kafka refusing the system's credentials is a readiness problem that names its cause, not a crash
// loop: every service starts and serves from its store, /readyz answers 503 naming each service's bus and why, and
// no process is restarted. Against the SASL_SSL listener of the run's broker (test/kafka/secure.ts).
jest.setTimeout(120_000);

let kafka: SecureKafka;
let dataDir: string;
let system: SystemProcess | null = null;

beforeAll(async () => {
  kafka = await secureTestKafka();
  dataDir = mkdtempSync(join(tmpdir(), 'svc-kafka-sasl-'));
});
afterAll(async () => {
  if (system) await system.kill().catch(() => undefined);
  await kafka?.release();
  rmSync(dataDir, { recursive: true, force: true });
});

it('with a wrong Kafka password the system serves, and /readyz names every bus and the refused credentials', async () => {
  system = await startSystem({
    DATA_DIR: dataDir,
    KAFKA_BROKERS: kafka.brokers.join(','),
    KAFKA_SSL: 'true',
    KAFKA_SSL_CA_FILE: kafka.caFile,
    KAFKA_SASL_MECHANISM: 'scram-sha-256',
    KAFKA_SASL_USERNAME: kafka.username,
    KAFKA_SASL_PASSWORD: 'not-the-password',
  });
  const api = client(system.url);
  const servicesPid = system.pids('services');
  expect(servicesPid).toHaveLength(1);

  // Served from the stores: sign-up and sign-in, while the events wait in the outboxes.
  const owner = await signUp(api, 'Refused');
  expect((await api.post('/api/v1/auth/login', { email: owner.email, password: owner.password })).status).toBe(200);

  const reason = 'Kafka: authentication failed (check KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD)';
  const buses = ['identity bus', 'billing bus', 'webhooks bus', 'regions bus'];
  let ready: Res | undefined;
  // The first probes may still be connecting; the refusal is named within a few.
  await eventually(
    async () => {
      ready = await api.get('/readyz');
      const reasons = ready.body.error?.details?.reasons ?? {};
      return buses.every((bus) => reasons[bus] === reason);
    },
    30_000,
    250,
  );
  expect(ready!.status).toBe(503);
  expect(ready!.body.error.details.down).toEqual(expect.arrayContaining(buses));
  expect(ready!.body.error.message).toContain(`identity bus (${reason})`);
  // Every service is up (none is `down`, as a crashed one would be); nothing names the user or the password.
  expect(Object.values(ready!.body.error.details.services as Record<string, string>).every((s) => s !== 'down')).toBe(true);
  expect(JSON.stringify(ready!.body)).not.toMatch(new RegExp(`${kafka.username}|not-the-password`));

  // Not a crash loop: a while later the same process serves, and the launcher restarted nothing.
  await new Promise((r) => setTimeout(r, 3000));
  expect(system.pids('services')).toEqual(servicesPid);
  expect(system.output()).not.toMatch(/exited; restarting/);
  expect((await api.get('/healthz')).status).toBe(200);
  expect((await api.get('/readyz')).status).toBe(503);

  expect(await system.stop()).toBe(0);
  system = null;
});
