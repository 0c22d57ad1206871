/**
 * `npm run bus:dead-letters -- list [group]` | `replay <group> <topic> <ref>` | `replay-all <group>`: the poison
 * messages a consumer group set aside after BUS_MAX_ATTEMPTS failed handler calls.
 * - Embedded bus (under DATA_DIR): `ref` is the message's seq; a replayed message is delivered to its group again,
 *   before the group's next messages.
 * - Kafka (KAFKA_BROKERS set): the `<topic>.dead-letters` topics; `ref` is the letter's `partition:offset` there. A
 *   replayed message is re-published to its topic for its group only (other groups skip it), after the messages
 *   already there.
 * Either way a replayed letter is listed no more.
 */
import { resolve } from 'node:path';
import { commonConfig, ConfigError, kafkaDeadLetters, kafkaSecurity, loadConfig, openEmbeddedBus, type KafkaSecurity } from '@svc/kit';

const USAGE = 'usage: bus:dead-letters -- list [group] | replay <group> <topic> <ref> | replay-all <group>';

function embedded(argv: string[]): number {
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
    console.error(USAGE);
    return 2;
  } finally {
    void bus.close();
  }
}

async function kafka(brokers: string[], security: KafkaSecurity, argv: string[]): Promise<number> {
  const [command, group, topic, ref] = argv;
  const known =
    command === 'list' || command === undefined || (command === 'replay' && group && topic && ref) || (command === 'replay-all' && group);
  if (!known) {
    console.error(USAGE);
    return 2;
  }
  const letters = kafkaDeadLetters({ ...security, brokers });
  try {
    if (command === 'list' || command === undefined) {
      const list = await letters.list(group);
      if (!list.length) console.log('No dead letters.');
      for (const d of list)
        console.log(
          `${d.group}  ${d.topic}  ${d.ref}  ${d.id}  (offset ${d.offset}) after ${d.attempts} attempts at ${d.failedAt}: ${d.error}`,
        );
      return 0;
    }
    if (command === 'replay') {
      const done = await letters.replay(group, (d) => d.topic === topic && d.ref === ref);
      console.log(done.length ? `Replayed ${topic} ${ref} to ${group}.` : 'No such dead letter.');
      return done.length ? 0 : 1;
    }
    const done = await letters.replay(group);
    console.log(`Replayed ${done.length} dead letter(s) to ${group}.`);
    return 0;
  } finally {
    await letters.close();
  }
}

let config: ReturnType<typeof loadConfig<typeof commonConfig>>;
try {
  config = loadConfig(commonConfig);
} catch (err) {
  if (!(err instanceof ConfigError)) throw err;
  console.error(`bus:dead-letters: ${err.message}`);
  process.exit(2);
}
const brokers = config.kafkaBrokers ?? [];
const argv = process.argv.slice(2);
if (brokers.length === 0) process.exitCode = embedded(argv);
else
  kafka(brokers, kafkaSecurity(config), argv).then(
    (code) => (process.exitCode = code),
    (err: unknown) => {
      console.error(`bus:dead-letters: ${(err as Error).message ?? err}`);
      process.exitCode = 1;
    },
  );
