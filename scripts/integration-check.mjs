// `npm run test:integration`: the storage and bus contract suites against real MongoDB and Kafka. Without their
// addresses those runs would skip silently, so say what is missing instead.
const missing = ['MONGODB_URI', 'KAFKA_BROKERS'].filter((name) => !process.env[name]);
if (missing.length) {
  process.stderr.write(
    `test:integration needs ${missing.join(' and ')}. With docker compose:\n` +
      `  docker compose up -d mongodb kafka\n` +
      `  MONGODB_URI='mongodb://127.0.0.1:27017/?directConnection=true' KAFKA_BROKERS=127.0.0.1:19092 npm run test:integration\n`,
  );
  process.exit(2);
}
