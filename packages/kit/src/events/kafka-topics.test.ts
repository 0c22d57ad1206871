import { ConfigResourceTypes, Kafka, logLevel, type Admin } from 'kafkajs';
import { message, unique, waitFor } from './bus.contract';
import { openKafkaBus } from './kafka';
import { createKafkaTopics } from './kafka-topics';
import { MissingTopicsError } from './types';

import { testKafkaBrokers } from '../../../../test/kafka/env';

// Topic creation against the real broker of the test run (auto.create.topics.enable=false, one node).
const brokers = testKafkaBrokers();
jest.setTimeout(60_000);

let admin: Admin;
beforeAll(async () => {
  admin = new Kafka({ brokers, clientId: 'kit-topics-test-admin', logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
});
afterAll(() => admin.disconnect());

async function minInsync(topic: string): Promise<{ value: string; isDefault: boolean }> {
  const { resources } = await admin.describeConfigs({
    includeSynonyms: false,
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ['min.insync.replicas'] }],
  });
  const entry = resources[0].configEntries.find((e) => e.configName === 'min.insync.replicas')!;
  return { value: entry.configValue, isDefault: entry.isDefault };
}

test('creates a topic with the configured replication factor and min.insync.replicas, set on the topic itself', async () => {
  const bus = openKafkaBus({ brokers, clientId: 'kit-topics-test', numPartitions: 2, replicationFactor: 1, minInsyncReplicas: 1 });
  try {
    const topic = unique('replicated');
    await bus.publish([message(topic, 'k', 1)]);
    const { topics } = await admin.fetchTopicMetadata({ topics: [topic] });
    expect(topics[0].partitions.map((p) => p.replicas.length)).toEqual([1, 1]);
    // A topic-level setting, not the broker's default: it holds whatever the brokers' defaults say.
    expect(await minInsync(topic)).toEqual({ value: '1', isDefault: false });
  } finally {
    await bus.close();
  }
});

test('a replication factor the cluster cannot give fails the publish naming the topic, and creates nothing', async () => {
  const bus = openKafkaBus({ brokers, clientId: 'kit-topics-test', replicationFactor: 3, minInsyncReplicas: 2 });
  try {
    const topic = unique('unreplicable');
    await expect(bus.publish([message(topic, 'k', 1)])).rejects.toThrow(
      new RegExp(`could not create Kafka topics ${topic}: .*[Rr]eplication.factor`),
    );
    expect(await admin.listTopics()).not.toContain(topic);
  } finally {
    await bus.close();
  }
});

test('with creation off, a missing topic fails publish and subscribe naming it; a deployed one is used', async () => {
  const reported: string[] = [];
  const bus = openKafkaBus({
    brokers,
    clientId: 'kit-topics-test',
    createTopics: false,
    replicationFactor: 1,
    minInsyncReplicas: 2,
    onError: (err) => reported.push(String((err as Error).message)),
  });
  try {
    const topic = unique('undeployed');
    const publishing = bus.publish([message(topic, 'k', 1)]);
    await expect(publishing).rejects.toBeInstanceOf(MissingTopicsError);
    await expect(publishing).rejects.toThrow(topic);
    await expect(bus.subscribe({ group: unique('g'), topics: [topic], handler: async () => {} })).rejects.toThrow(
      new MissingTopicsError([topic]).message,
    );
    expect(await admin.listTopics()).not.toContain(topic);

    // Deployed (as `npm run kafka:topics` does), with a lower min.insync.replicas than this bus asks for: used, and reported.
    await createKafkaTopics(admin, [topic], { numPartitions: 1, replicationFactor: 1, minInsyncReplicas: 1 });
    const got: string[] = [];
    const sub = await bus.subscribe({ group: unique('g'), topics: [topic], handler: async (m) => void got.push(m.id) });
    await bus.publish([message(topic, 'k', 2)]);
    await waitFor('the message', () => got.includes(`${topic}-2`));
    await sub.stop();
    expect(reported).toContain(`Kafka topic ${topic} has min.insync.replicas 1; KAFKA_MIN_INSYNC_REPLICAS asks for 2`);
  } finally {
    await bus.close();
  }
});
