/**
 * The dead letters of the Kafka bus, for `npm run bus:dead-letters`: every `<topic>.dead-letters` topic holds the
 * poison messages its consumer groups set aside (the original key, value and headers, plus dead-letter-group,
 * -error, -attempts and -offset). A replay re-publishes one to its original topic for its group only (the
 * `replay-group` header: the other groups skip it, they had their own turn), then appends a marker naming it to the
 * dead-letter topic, so that a replayed letter is listed no more and `replay-all` does not send it twice. A crash
 * between the two sends it again on the next replay: at least once, like every delivery.
 */
import { randomUUID } from 'node:crypto';
import { Partitioners, type IHeaders } from 'kafkajs';
import type { KafkaSecurity } from '../config';
import { ID_HEADER, REPLAY_GROUP_HEADER } from './kafka';
import { kafkaClient } from './kafka-client';

const SUFFIX = '.dead-letters';
/** On a marker: the dead letter (`partition:offset` in its dead-letter topic) that was replayed. */
const REPLAYED_HEADER = 'dead-letter-replayed';
const READ_TIMEOUT_MS = 60_000;

export interface KafkaDeadLetter {
  group: string;
  /** The topic it came from (and is replayed to). */
  topic: string;
  /** Where it is in `<topic>.dead-letters`: `partition:offset`; names it for `replay`. */
  ref: string;
  id: string;
  attempts: number;
  error: string;
  /** Its original position, `offset` on its partition of `topic`. */
  offset: string;
  failedAt: string;
}

interface Letter extends KafkaDeadLetter {
  key: Buffer | null;
  value: Buffer | null;
  headers: Record<string, string>;
}

export interface KafkaDeadLetters {
  /** Dead letters not replayed yet, oldest first (of one group, or all). */
  list(group?: string): Promise<KafkaDeadLetter[]>;
  /** Replays the group's letters that `select` picks; returns them. */
  replay(group: string, select?: (letter: KafkaDeadLetter) => boolean): Promise<KafkaDeadLetter[]>;
  close(): Promise<void>;
}

export interface KafkaDeadLettersOptions extends KafkaSecurity {
  brokers: string[];
  clientId?: string;
}

export function kafkaDeadLetters(options: KafkaDeadLettersOptions): KafkaDeadLetters {
  const kafka = kafkaClient({
    ...options,
    clientId: options.clientId ?? 'svc-dead-letters',
    retry: { retries: 3, initialRetryTime: 200, maxRetryTime: 2000 },
  });
  const admin = kafka.admin();
  // The bus's partitioner, so a replayed message lands on its key's partition.
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
  let connected: Promise<void> | null = null;
  const connect = () => (connected ??= Promise.all([admin.connect(), producer.connect()]).then(() => undefined));

  /** Reads every dead-letter topic to its current end with a throwaway group, then deletes that group. */
  async function readAll(): Promise<Letter[]> {
    await connect();
    const topics = (await admin.listTopics()).filter((t) => t.endsWith(SUFFIX));
    const ends = new Map<string, bigint>(); // `topic:partition` -> offset of its last message
    for (const topic of topics)
      for (const p of await admin.fetchTopicOffsets(topic))
        if (BigInt(p.high) > BigInt(p.low)) ends.set(`${topic}:${p.partition}`, BigInt(p.high) - 1n);
    if (ends.size === 0) return [];
    const groupId = `svc-dead-letters-${randomUUID()}`;
    const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 500 });
    const letters: Letter[] = [];
    const replayed = new Set<string>();
    try {
      await consumer.connect();
      await consumer.subscribe({ topics: topics.filter((t) => [...ends.keys()].some((k) => k.startsWith(`${t}:`))), fromBeginning: true });
      let timer: NodeJS.Timeout | undefined;
      await new Promise<void>((done, fail) => {
        // A partition whose end was removed meanwhile (retention) would never be reached: the read is bounded.
        timer = setTimeout(
          () => fail(new Error(`the dead letters were not read to their end within ${READ_TIMEOUT_MS} ms`)),
          READ_TIMEOUT_MS,
        );
        consumer.on(consumer.events.CRASH, (e) => fail(e.payload.error));
        const check = () => {
          if (ends.size === 0) done();
        };
        consumer
          .run({
            eachMessage: async ({ topic, partition, message }) => {
              const headers = strings(message.headers);
              const ref = `${partition}:${message.offset}`;
              const original = topic.slice(0, -SUFFIX.length);
              if (headers[REPLAYED_HEADER]) replayed.add(`${original}|${headers['dead-letter-group']}|${headers[REPLAYED_HEADER]}`);
              else
                letters.push({
                  group: headers['dead-letter-group'] ?? '',
                  topic: original,
                  ref,
                  id: headers[ID_HEADER] ?? '',
                  attempts: Number(headers['dead-letter-attempts'] ?? 0),
                  error: headers['dead-letter-error'] ?? '',
                  offset: headers['dead-letter-offset'] ?? '',
                  failedAt: new Date(Number(message.timestamp)).toISOString(),
                  key: message.key,
                  value: message.value,
                  headers,
                });
              const end = ends.get(`${topic}:${partition}`);
              if (end !== undefined && BigInt(message.offset) >= end) ends.delete(`${topic}:${partition}`);
              check();
            },
          })
          .catch(fail);
      }).finally(() => clearTimeout(timer));
    } finally {
      await consumer.disconnect().catch(() => {});
      await admin.deleteGroups([groupId]).catch(() => {});
    }
    return letters.filter((l) => !replayed.has(`${l.topic}|${l.group}|${l.ref}`)).sort((a, b) => a.failedAt.localeCompare(b.failedAt));
  }

  return {
    async list(group) {
      return (await readAll()).filter((l) => group === undefined || l.group === group).map(publicPart);
    },
    async replay(group, select = () => true) {
      const chosen = (await readAll()).filter((l) => l.group === group && select(publicPart(l)));
      for (const l of chosen) {
        const headers: IHeaders = {};
        for (const [name, value] of Object.entries(l.headers)) if (!name.startsWith('dead-letter-')) headers[name] = value;
        headers[REPLAY_GROUP_HEADER] = group;
        await producer.send({ topic: l.topic, acks: -1, messages: [{ key: l.key, value: l.value, headers }] });
        await producer.send({
          topic: `${l.topic}${SUFFIX}`,
          acks: -1,
          messages: [{ key: l.key, value: null, headers: { 'dead-letter-group': group, [REPLAYED_HEADER]: l.ref } }],
        });
      }
      return chosen.map(publicPart);
    },
    async close() {
      if (connected) await connected.catch(() => {});
      await Promise.all([admin.disconnect(), producer.disconnect()]);
    },
  };
}

function publicPart(l: Letter): KafkaDeadLetter {
  const { group, topic, ref, id, attempts, error, offset, failedAt } = l;
  return { group, topic, ref, id, attempts, error, offset, failedAt };
}

function strings(headers: IHeaders | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, raw] of Object.entries(headers ?? {})) {
    const value = Array.isArray(raw) ? raw[raw.length - 1] : raw;
    if (value !== undefined) out[name] = value.toString();
  }
  return out;
}
