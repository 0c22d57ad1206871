import { context } from '@opentelemetry/api';
import { suppressTracing } from '@opentelemetry/core';

/** Runs background housekeeping (polls, probes) without creating traces: they would drown real requests. */
export function untraced<T>(fn: () => T): T {
  return context.with(suppressTracing(context.active()), fn);
}
