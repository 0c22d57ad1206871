/**
 * `npm run kafka:local`: the test suite's Kafka broker (test/kafka/broker.ts) in the foreground, for a person.
 * Prints `KAFKA_BROKERS=127.0.0.1:PORT` once it accepts connections; SIGTERM or Ctrl-C stops it and removes its data.
 * `KAFKA_PORT` picks the port (default: a free one).
 */
import { startKafkaBroker } from '../test/kafka/broker';

async function main(): Promise<void> {
  const port = process.env.KAFKA_PORT ? Number(process.env.KAFKA_PORT) : undefined;
  const broker = await startKafkaBroker({ port, log: process.env.KAFKA_LOG ? (line) => process.stderr.write(`${line}\n`) : undefined });
  process.stdout.write(`KAFKA_BROKERS=${broker.brokers}\n`);
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    void broker.destroy().then(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  // The broker exiting on its own (out of memory, killed) ends this command too.
  const watch = setInterval(() => {
    if (!broker.running && !stopping) {
      process.stderr.write('kafka:local: the broker exited\n');
      clearInterval(watch);
      void broker.destroy().then(() => process.exit(1));
    }
  }, 500);
}

main().catch((err: Error) => {
  process.stderr.write(`kafka:local: ${err.message}\n`);
  process.exit(1);
});
