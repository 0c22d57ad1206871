/**
 * `npm run kafka:topics`: creates every topic the services use (each service topic and its `.dead-letters`) with
 * KAFKA_PARTITIONS, KAFKA_REPLICATION_FACTOR and KAFKA_MIN_INSYNC_REPLICAS (defaults by NODE_ENV, as the services
 * read them), and checks the ones that exist. Production services never create topics (KAFKA_CREATE_TOPICS off):
 * The Helm chart (deploy/helm/svc) runs this as the kafka-topics hook Job (`node dist/kafka-topics.js`). Exit 0 when every topic exists as
 * configured; 1 naming what is wrong (a topic with fewer replicas or a lower min.insync.replicas than configured is
 * reported, never changed: see docs/runbooks/distributed.md); 2 for bad settings.
 */
import { logLevel } from 'kafkajs';
import { commonConfig, ConfigError, kafkaSecurity, kafkaTopicSettings, loadConfig, type KafkaSecurity } from '@svc/kit/config';
import { kafkaClient } from '@svc/kit/events/kafka-client';
import { absentTopics, createKafkaTopics, topicProblems } from '@svc/kit/events/kafka-topics';
import { SERVICE_TOPICS } from '@svc/contracts/topics';
import { namespaced } from '@svc/kit/events/namespace';

async function main(): Promise<number> {
  let brokers: string[];
  let settings: ReturnType<typeof kafkaTopicSettings>;
  let topics: string[];
  let security: KafkaSecurity;
  try {
    const config = loadConfig(commonConfig);
    settings = kafkaTopicSettings(config);
    brokers = config.kafkaBrokers ?? [];
    security = kafkaSecurity(config);
    // KAFKA_NAMESPACE: the names the services of that deployment use on the wire.
    topics = SERVICE_TOPICS.map((t) => namespaced(config.kafkaNamespace, t));
    if (brokers.length === 0) throw new ConfigError(['KAFKA_BROKERS is required']);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    console.error(`kafka:topics: ${err.message}`);
    return 2;
  }
  const admin = kafkaClient({
    ...security,
    clientId: 'svc-kafka-topics',
    brokers,
    logLevel: logLevel.NOTHING,
    retry: { retries: 5, initialRetryTime: 300, maxRetryTime: 5000 },
  }).admin();
  await admin.connect();
  try {
    const absent = await absentTopics(admin, topics);
    if (absent.length) await createKafkaTopics(admin, absent, settings);
    for (const topic of absent)
      console.log(
        `created ${topic}: ${settings.numPartitions} partitions, ${settings.replicationFactor} replicas, min.insync.replicas ${settings.minInsyncReplicas}`,
      );
    const problems = await topicProblems(admin, topics, settings);
    for (const p of problems) console.error(p);
    if (problems.length === 0) console.log(`${topics.length} topics ready`);
    return problems.length ? 1 : 0;
  } finally {
    await admin.disconnect();
  }
}

main().then(
  (code) => process.exit(code),
  (err: Error) => {
    console.error(`kafka:topics: ${err.message}`);
    process.exit(1);
  },
);
