/**
 * The last step of a process's graceful stop: hand the spans still buffered to the exporter. telemetry.ts registers
 * the SDK's shutdown here when it starts one; runMain calls `flushTelemetry` after the service has drained and before
 * `process.exit()` (which skips `beforeExit`, so nothing else would). Side-effect free: importing it starts nothing.
 */

/** The longest a stop waits for the exporter: a collector that does not answer must not hold the pod's exit. */
export const FLUSH_TIMEOUT_MS = 3000;

let flush: (() => Promise<void>) | null = null;

/** Called by telemetry.ts with the SDK's shutdown (flushes the span processors, then closes the exporters). */
export function onTelemetryFlush(fn: () => Promise<void>): void {
  flush = fn;
}

/** Exports what is buffered, waiting at most `timeoutMs`; never rejects. Resolves at once without telemetry. */
export async function flushTelemetry(timeoutMs = FLUSH_TIMEOUT_MS): Promise<void> {
  const fn = flush;
  if (!fn) return;
  flush = null;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    fn().catch(() => undefined),
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
      timer.unref();
    }),
  ]);
  clearTimeout(timer);
}
