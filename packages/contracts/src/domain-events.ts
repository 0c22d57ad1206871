import { eventsV1 } from '@svc/proto';
import { context, propagation } from '@opentelemetry/api';
import { newId, nowIso, PoisonMessageError, type BusMessage } from '@svc/kit';

type EventData = eventsV1.Event['data'];

/**
 * A domain event as a bus message: the protobuf `events.v1.Event`, keyed by tenant so a tenant's events stay
 * in order, with the type and the current trace context in headers so the consumer's span joins the trace.
 */
export function domainEvent(topic: string, type: string, tenantId: string, data: EventData): BusMessage {
  const event: eventsV1.Event = { id: newId('evt'), type, tenantId, createdAt: nowIso(), data };
  const headers: Record<string, string> = { 'event-type': type };
  propagation.inject(context.active(), headers);
  return { id: event.id, topic, key: tenantId, value: eventsV1.Event.encode(event).finish(), headers };
}

/** Decodes a bus message's value; bytes that are not an event are a poison message (retrying cannot help). */
export function decodeDomainEvent(value: Uint8Array): eventsV1.Event {
  try {
    return eventsV1.Event.decode(value);
  } catch (err) {
    throw new PoisonMessageError(`not a domain event: ${(err as Error).message}`, { cause: err });
  }
}
