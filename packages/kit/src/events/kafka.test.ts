import { Kafka, logLevel } from 'kafkajs';
import { busContract, message, unique } from './bus.contract';
import { deadLetterTopic, openKafkaBus } from './kafka';
import { PoisonMessageError } from './poison';

import { testKafkaBrokers } from '../../../../test/kafka/env';

// Against the real broker the jest global set-up starts (test/kafka/broker.ts), or KAFKA_BROKERS when set.
const brokers = testKafkaBrokers();

describe('kafka', () => {
  // A first consumer-group join takes a few seconds on a fresh broker.
  jest.setTimeout(60_000);
  busContract('kafka', async (options) => openKafkaBus({ brokers, clientId: 'kit-events-test', ...options }));

  test('topics, dead letters included, are created with the configured partitions and replication', async () => {
    // Not the broker's default (compose sets KAFKA_NUM_PARTITIONS 3), so an auto-created topic would show.
    const bus = openKafkaBus({ brokers, clientId: 'kit-events-test', numPartitions: 4, replicationFactor: 1, maxAttempts: 1 });
    const admin = new Kafka({ brokers, clientId: 'kit-events-test-admin', logLevel: logLevel.ERROR }).admin();
    await admin.connect();
    try {
      const topic = unique('configured');
      const sub = await bus.subscribe({
        group: unique('g'),
        topics: [topic],
        handler: async () => {
          throw new PoisonMessageError('to the dead letters');
        },
      });
      await bus.publish([message(topic, 'k', 0)]);
      const dlq = deadLetterTopic(topic);
      let partitions: number[] = [];
      const deadline = Date.now() + 20_000;
      while (Date.now() < deadline) {
        const topics = (await admin.listTopics()).filter((t) => t === topic || t === dlq);
        if (topics.length === 2) {
          const { topics: meta } = await admin.fetchTopicMetadata({ topics: [topic, dlq] });
          partitions = meta.map((t) => t.partitions.length);
          expect(meta.every((t) => t.partitions.every((p) => p.replicas.length === 1))).toBe(true);
          break;
        }
        await new Promise((r) => setTimeout(r, 100));
      }
      await sub.stop();
      expect(partitions).toEqual([4, 4]);
    } finally {
      await admin.disconnect();
      await bus.close();
    }
  });
});
