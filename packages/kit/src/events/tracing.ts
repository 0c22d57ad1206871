/**
 * Trace context across the bus. The event carries the writer's context in its `traceparent` header (domainEvent).
 * The relay publishes each message under a PRODUCER span that is a child of that context, and every consumer runs
 * its handler under a CONSUMER span that is a child of the producer's: one trace follows a write from the gateway
 * through the service, the outbox relay and the bus into each consumer, on both adapters. Attributes name the
 * topic, group and event, never payloads. Without the SDK (telemetry off) these are no-ops.
 */
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Context, type Span } from '@opentelemetry/api';
import type { BusMessage, EventBus, ReceivedMessage, SubscribeOptions } from './types';

const tracer = trace.getTracer('svc-bus');

function attributes(m: BusMessage, extra: Record<string, string> = {}) {
  return {
    'messaging.system': 'svc-bus',
    'messaging.destination.name': m.topic,
    'messaging.message.id': m.id,
    'svc.event_type': m.headers?.['event-type'] ?? '',
    ...extra,
  };
}

/** Publishes under one PRODUCER span per message, each a child of the context the message was written in. */
export async function publishTraced(bus: EventBus, messages: BusMessage[]): Promise<void> {
  const spans: Span[] = [];
  const traced = messages.map((m) => {
    const parent = propagation.extract(ROOT_CONTEXT, m.headers ?? {});
    const span = tracer.startSpan(`publish ${m.topic}`, { kind: SpanKind.PRODUCER, attributes: attributes(m) }, parent);
    spans.push(span);
    const headers = { ...m.headers };
    propagation.inject(trace.setSpan(parent, span), headers);
    return { ...m, headers };
  });
  await within(spans, () => bus.publish(traced));
}

/** A CONSUMER span for `m` in the trace its writer started (the context in its headers), and the context it is in. */
function consumerSpan(m: ReceivedMessage, group: string, extra: Record<string, string> = {}): { span: Span; active: Context } {
  const parent = propagation.extract(ROOT_CONTEXT, m.headers ?? {});
  const span = tracer.startSpan(
    `process ${m.topic}`,
    { kind: SpanKind.CONSUMER, attributes: attributes(m, { 'messaging.consumer.group.name': group, ...extra }) },
    parent,
  );
  return { span, active: trace.setSpan(parent, span) };
}

/** Runs `work` and ends `spans` with it, marking them failed when it throws. */
async function within(spans: Span[], work: () => Promise<void>): Promise<void> {
  try {
    await work();
  } catch (err) {
    for (const s of spans) s.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
    throw err;
  } finally {
    for (const s of spans) s.end();
  }
}

/** The handler of `options`, run under a CONSUMER span joined to the message's trace (and active during it). */
export function tracedHandler(options: SubscribeOptions): SubscribeOptions['handler'] {
  return (m: ReceivedMessage) => {
    const { span, active } = consumerSpan(m, options.group);
    return within([span], () => context.with(active, () => options.handler(m)));
  };
}

/**
 * The batch handler of `options`, if any: each message gets its CONSUMER span in its own trace, as with `handler`;
 * they end together when the batch does (the batch's work runs outside them: one call, several traces).
 */
export function tracedBatchHandler(options: SubscribeOptions): SubscribeOptions['handleBatch'] {
  const handleBatch = options.handleBatch;
  if (!handleBatch) return undefined;
  return (messages: ReceivedMessage[]) =>
    within(
      messages.map((m) => consumerSpan(m, options.group, { 'messaging.batch.message_count': String(messages.length) }).span),
      () => handleBatch(messages),
    );
}

/** A bus whose subscriptions run their handlers under consumer spans (both adapters). */
export function withTracing(bus: EventBus): EventBus {
  return {
    kind: bus.kind,
    publish: (messages) => bus.publish(messages),
    subscribe: (options) => bus.subscribe({ ...options, handler: tracedHandler(options), handleBatch: tracedBatchHandler(options) }),
    ping: () => bus.ping(),
    stalled: () => bus.stalled(),
    close: () => bus.close(),
  };
}
