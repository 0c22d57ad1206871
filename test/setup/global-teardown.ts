/** Stops the Kafka broker the global set-up started and removes its data. */
export default async function globalTeardown(): Promise<void> {
  await globalThis.svcTestKafka?.destroy();
}
