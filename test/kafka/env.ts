/**
 * The broker of this test run: the jest global set-up starts one (or takes KAFKA_BROKERS) and passes it as
 * TEST_KAFKA_BROKERS. Missing means the suite runs outside `npm test`'s set-up: fail, never skip.
 */
export function testKafkaBrokers(): string[] {
  const brokers = (process.env.TEST_KAFKA_BROKERS ?? process.env.KAFKA_BROKERS ?? '')
    .split(',')
    .map((b) => b.trim())
    .filter(Boolean);
  if (!brokers.length) throw new Error('No Kafka broker: run the suite through jest (its global set-up starts one) or set KAFKA_BROKERS.');
  return brokers;
}
