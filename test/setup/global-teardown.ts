import { rmSync } from 'node:fs';
import { BROKER_PID_FILE } from './global';

/** Stops the Kafka broker the global set-up started and removes its data. */
export default async function globalTeardown(): Promise<void> {
  await globalThis.svcTestKafka?.destroy();
  rmSync(BROKER_PID_FILE, { force: true });
}
