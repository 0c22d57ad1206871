/**
 * Whether this process exports traces: the standard OTEL_* variables name an exporter and the SDK is not disabled.
 * Side-effect free, so the launcher can ask it too (telemetry.ts starts the SDK on import).
 */
export function tracesExported(env: NodeJS.ProcessEnv): boolean {
  return (
    env.OTEL_SDK_DISABLED !== 'true' &&
    Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || env.OTEL_TRACES_EXPORTER)
  );
}
