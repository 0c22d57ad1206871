/**
 * Kafka topics as this platform deploys them: each topic asked for (the services' list is contracts' `SERVICE_TOPICS`,
 * every topic with its `.dead-letters` topic), with the configured partitions, replication factor and
 * min.insync.replicas. Used by the bus when it may create a missing topic (not in
 * production) and by `npm run kafka:topics`, which the deployment runs to create them (deploy/helm/svc: the kafka-topics hook Job).
 */
import type { Admin } from 'kafkajs';

/** Where a group's poison messages go: read them with any Kafka tool, replay by publishing them again. */
export const deadLetterTopic = (topic: string) => `${topic}.dead-letters`;

/**
 * kafkajs's enum, required when a topic's settings are read: contracts imports `deadLetterTopic` from here, so a
 * value import of kafkajs would load it (~70 ms) in every process, Kafka bus or not.
 */
function configResourceTypes(): typeof import('kafkajs').ConfigResourceTypes {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- deliberate lazy load
  return (require('kafkajs') as typeof import('kafkajs')).ConfigResourceTypes;
}

export interface TopicSettings {
  numPartitions: number;
  replicationFactor: number;
  minInsyncReplicas: number;
}

/**
 * Creates those of `topics` that do not exist; throws when the broker refuses (too few brokers, ACLs), with each
 * topic's reason in the message (kafkajs's own says only "Topic creation errors").
 */
export async function createKafkaTopics(admin: Admin, topics: readonly string[], settings: TopicSettings): Promise<void> {
  try {
    await createTopics(admin, topics, settings);
  } catch (err) {
    const reasons = (err as { errors?: Array<{ topic?: string; message: string }> }).errors;
    if (!Array.isArray(reasons) || reasons.length === 0) throw err;
    throw new Error(reasons.map((e) => `${e.topic ?? '?'}: ${e.message}`).join('; '), { cause: err });
  }
}

async function createTopics(admin: Admin, topics: readonly string[], settings: TopicSettings): Promise<void> {
  // Resolves false (no throw) when every topic already exists.
  await admin.createTopics({
    topics: topics.map((topic) => ({
      topic,
      numPartitions: settings.numPartitions,
      replicationFactor: settings.replicationFactor,
      configEntries: [{ name: 'min.insync.replicas', value: String(settings.minInsyncReplicas) }],
    })),
    waitForLeaders: true,
  });
}

/** Those of `topics` the cluster does not have. */
export async function absentTopics(admin: Admin, topics: readonly string[]): Promise<string[]> {
  const existing = new Set(await admin.listTopics());
  return topics.filter((t) => !existing.has(t));
}

/**
 * Existing topics that are less durable than configured: fewer replicas than the replication factor (a partition
 * reassignment mends it), or a min.insync.replicas lower than configured (kafka-configs --alter mends it).
 */
export async function topicProblems(admin: Admin, topics: readonly string[], settings: TopicSettings): Promise<string[]> {
  if (topics.length === 0) return [];
  const problems: string[] = [];
  const { topics: meta } = await admin.fetchTopicMetadata({ topics: [...topics] });
  for (const t of meta) {
    const replicas = Math.min(...t.partitions.map((p) => p.replicas.length));
    if (replicas < settings.replicationFactor)
      problems.push(`Kafka topic ${t.name} has ${replicas} replica(s); KAFKA_REPLICATION_FACTOR asks for ${settings.replicationFactor}`);
  }
  const { resources } = await admin.describeConfigs({
    includeSynonyms: false,
    resources: topics.map((name) => ({ type: configResourceTypes().TOPIC, name, configNames: ['min.insync.replicas'] })),
  });
  for (const r of resources) {
    const value = Number(r.configEntries.find((e) => e.configName === 'min.insync.replicas')?.configValue);
    if (value < settings.minInsyncReplicas)
      problems.push(
        `Kafka topic ${r.resourceName} has min.insync.replicas ${value}; KAFKA_MIN_INSYNC_REPLICAS asks for ${settings.minInsyncReplicas}`,
      );
  }
  return problems;
}
