import { context } from '@opentelemetry/api';
import type * as OtelCore from '@opentelemetry/core';
import { telemetryEnabled } from './telemetry';

/**
 * Runs background housekeeping (polls, probes) without creating traces: they would drown real requests. Without
 * traces exported there is nothing to suppress, and @opentelemetry/core (~30 ms of a process's start) is not loaded.
 */
export function untraced<T>(fn: () => T): T {
  if (!telemetryEnabled) return fn();
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- deliberate lazy load
  const { suppressTracing } = require('@opentelemetry/core') as typeof OtelCore;
  return context.with(suppressTracing(context.active()), fn);
}
