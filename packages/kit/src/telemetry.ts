/**
 * OpenTelemetry bootstrap. Imported first by every process entry so instrumentation patches http, grpc,
 * fastify, mongodb, ioredis and kafkajs before they load. Configured only by the standard OTEL_* variables;
 * without an exporter endpoint or OTEL_TRACES_EXPORTER it stays off, and its modules are not even loaded.
 */
import { tracesExported } from './telemetry-config';
import { flushTelemetry, onTelemetryFlush } from './telemetry-flush';

const enabled = tracesExported(process.env);

if (enabled) {
  /* eslint-disable @typescript-eslint/no-require-imports */
  const { NodeSDK } = require('@opentelemetry/sdk-node') as typeof import('@opentelemetry/sdk-node');
  const { getNodeAutoInstrumentations } =
    require('@opentelemetry/auto-instrumentations-node') as typeof import('@opentelemetry/auto-instrumentations-node');
  const sdk = new NodeSDK({
    instrumentations: [
      getNodeAutoInstrumentations({
        // File system and DNS spans are noise at this level.
        '@opentelemetry/instrumentation-fs': { enabled: false },
        '@opentelemetry/instrumentation-dns': { enabled: false },
        // Housekeeping calls (revocation feed, key fetches, health probes) would drown real requests.
        '@opentelemetry/instrumentation-grpc': { ignoreGrpcMethods: ['ListRevocations', 'WatchRevocations', 'GetJwks', 'Check'] },
        // The bus is traced by the kit itself (events/tracing.ts), the same on Kafka and the embedded log; kafkajs's
        // own instrumentation would overwrite the traceparent each event carries from the write that caused it.
        '@opentelemetry/instrumentation-kafkajs': { enabled: false },
      }),
    ],
  });
  sdk.start();
  // A graceful stop (runMain) flushes before process.exit(); a process that ends by itself flushes on beforeExit.
  onTelemetryFlush(() => sdk.shutdown());
  process.once('beforeExit', () => void flushTelemetry());
}

export const telemetryEnabled = enabled;
