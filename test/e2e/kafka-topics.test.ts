import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ConfigResourceTypes, Kafka, logLevel, type Admin } from 'kafkajs';
import { BUS_HEALTH, checkHealth, createClient, reservablePort } from '@svc/kit';
import { TOPICS } from '@svc/contracts';
import { regionsV1 } from '@svc/proto';
import { startKafkaBroker, type KafkaBroker } from '../kafka/broker';

// Issue 19 (2e): production never creates topics implicitly. A service started in production with a topic missing
// stops naming it; `kafka:topics` (the deployment's kafka-topics Job) creates them with the configured replication.
jest.setTimeout(120_000);

const ROOT = resolve(__dirname, '../..');
let dataDir: string;
let broker: KafkaBroker;
let admin: Admin;

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'svc-kafka-topics-'));
  broker = await startKafkaBroker(); // its own: the suite's broker may hold the service topics already
  admin = new Kafka({ brokers: [broker.brokers], clientId: 'topics-test', logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
});
afterAll(async () => {
  await admin?.disconnect();
  await broker?.destroy();
  rmSync(dataDir, { recursive: true, force: true });
});

/** Production settings on a one-broker cluster (a replication factor of 1 is all it can give). */
const production = () => ({
  PATH: process.env.PATH ?? '',
  NODE_ENV: 'production',
  KAFKA_BROKERS: broker.brokers,
  SVC_MASTER_KEY: randomBytes(32).toString('base64'),
  DATA_DIR: dataDir,
  LOG_LEVEL: 'warn',
});

function run(script: string, env: Record<string, string>) {
  const proc = spawn(process.execPath, [script], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  proc.stdout.on('data', (c: Buffer) => (output += c.toString()));
  proc.stderr.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<number | null>((done) => proc.once('exit', (code) => done(code)));
  return { proc, exited, output: () => output };
}

it('a production service stops naming the missing topics, and creates none', async () => {
  const regions = run('dist/services/regions.js', { ...production(), KAFKA_REPLICATION_FACTOR: '1', REGIONS_PORT: '0' });
  const timer = setTimeout(() => regions.proc.kill('SIGKILL'), 60_000);
  const code = await regions.exited;
  clearTimeout(timer);
  expect({ code, output: regions.output() }).toEqual({ code: 1, output: expect.stringContaining('Kafka topics missing') });
  expect(regions.output()).toContain(TOPICS.identity);
  expect(regions.output()).toContain(TOPICS.billing);
  expect((await admin.listTopics()).filter((t) => t.startsWith('svc.'))).toEqual([]);
});

it('kafka:topics creates every topic with the configured replication, then the service runs', async () => {
  const first = run('dist/kafka-topics.js', { ...production(), KAFKA_REPLICATION_FACTOR: '1', KAFKA_MIN_INSYNC_REPLICAS: '1' });
  expect({ code: await first.exited, output: first.output() }).toEqual({ code: 0, output: expect.stringContaining('topics ready') });
  const topics = (await admin.listTopics()).filter((t) => t.startsWith('svc.')).sort();
  // Every service topic and its dead letters.
  expect(topics).toEqual(
    Object.values(TOPICS)
      .flatMap((t) => [t, `${t}.dead-letters`])
      .sort(),
  );
  const { topics: meta } = await admin.fetchTopicMetadata({ topics });
  for (const t of meta)
    expect({ topic: t.name, partitions: t.partitions.length, replicas: t.partitions[0].replicas.length }).toEqual({
      topic: t.name,
      partitions: 6,
      replicas: 1,
    });
  const { resources } = await admin.describeConfigs({
    includeSynonyms: false,
    resources: topics.map((name) => ({ type: ConfigResourceTypes.TOPIC, name, configNames: ['min.insync.replicas'] })),
  });
  for (const r of resources) expect(r.configEntries[0]).toMatchObject({ configValue: '1', isDefault: false });

  // The production defaults (3 replicas, min.insync 2) against these topics: reported, nothing changed.
  const strict = run('dist/kafka-topics.js', production());
  expect(await strict.exited).toBe(1);
  expect(strict.output()).toContain(`Kafka topic ${TOPICS.identity} has 1 replica(s); KAFKA_REPLICATION_FACTOR asks for 3`);
  expect(strict.output()).toContain(`Kafka topic ${TOPICS.identity} has min.insync.replicas 1; KAFKA_MIN_INSYNC_REPLICAS asks for 2`);

  // Deployed: the production service starts, and its consumers run.
  const port = await reservablePort('127.0.0.1');
  const regions = run('dist/services/regions.js', { ...production(), KAFKA_REPLICATION_FACTOR: '1', REGIONS_PORT: String(port) });
  const client = createClient(regionsV1.RegionsServiceService, `127.0.0.1:${port}`, { deadlineMs: 3000 });
  try {
    const deadline = Date.now() + 45_000;
    while (!(await checkHealth(client.grpcClient, BUS_HEALTH, 3000))) {
      if (regions.proc.exitCode !== null || Date.now() > deadline) throw new Error(`regions did not subscribe:\n${regions.output()}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  } finally {
    client.close();
    regions.proc.kill('SIGTERM');
  }
  expect(await regions.exited).toBe(0);
});
