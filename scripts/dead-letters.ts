/**
 * `npm run bus:dead-letters -- list [group]` | `replay <group> <topic> <seq>` | `replay-all <group>`: the messages
 * a consumer group set aside after BUS_MAX_ATTEMPTS failed handler calls, on the embedded bus under DATA_DIR. A
 * replayed message is delivered to its group again, before the group's next messages. With Kafka, dead letters are
 * on `<topic>.dead-letters` (headers: dead-letter-group, -error, -attempts, -offset): read and re-publish them with
 * the usual Kafka tools.
 */
import { resolve } from 'node:path';
import { openEmbeddedBus } from '@svc/kit';

function main(argv: string[]): number {
  if (process.env.KAFKA_BROKERS) {
    console.error('KAFKA_BROKERS is set: dead letters are on the <topic>.dead-letters topics; use Kafka tools to read and replay them.');
    return 2;
  }
  const bus = openEmbeddedBus({ path: resolve(process.env.DATA_DIR || './.data', 'bus.db') });
  try {
    const [command, group, topic, seq] = argv;
    if (command === 'list' || command === undefined) {
      const letters = bus.deadLetters(group);
      if (!letters.length) console.log('No dead letters.');
      for (const d of letters)
        console.log(`${d.group}  ${d.topic}  seq ${d.seq}  ${d.id}  after ${d.attempts} attempts at ${d.failedAt}: ${d.error}`);
      return 0;
    }
    if (command === 'replay' && group && topic && seq) {
      const ok = bus.replayDeadLetter(group, topic, Number(seq));
      console.log(ok ? `Replaying ${topic} seq ${seq} to ${group}.` : 'No such dead letter.');
      return ok ? 0 : 1;
    }
    if (command === 'replay-all' && group) {
      const letters = bus.deadLetters(group);
      for (const d of letters) bus.replayDeadLetter(d.group, d.topic, d.seq);
      console.log(`Replaying ${letters.length} dead letter(s) to ${group}.`);
      return 0;
    }
    console.error('usage: bus:dead-letters -- list [group] | replay <group> <topic> <seq> | replay-all <group>');
    return 2;
  } finally {
    void bus.close();
  }
}

process.exitCode = main(process.argv.slice(2));
